//! docs/config.md's key table and the code's (`vitamin_runtime::config::KEYS`) say the same:
//! every key, its section, its environment variable and its default, in the same order; every
//! variable the parsers ask for is a key; at most 20 `VITAMIN_*` names are read.

use vitamin_runtime::config::{Layers, Section, KEYS};

fn doc_rows() -> Vec<(String, String, String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md");
    let text = std::fs::read_to_string(path).expect("docs/config.md");
    let (_, rest) = text.split_once("<!-- keys: begin -->").expect("the begin marker");
    let (table, _) = rest.split_once("<!-- keys: end -->").expect("the end marker");
    let cell = |c: &str| c.trim().trim_matches('`').to_string();
    table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cols: Vec<&str> = l.split('|').collect();
            (cell(cols[1]), cell(cols[2]), cell(cols[3]), cell(cols[4]))
        })
        .collect()
}

#[test]
fn the_docs_table_lists_every_key_as_the_code_does() {
    let rows = doc_rows();
    let code: Vec<(String, String, String, String)> = KEYS
        .iter()
        .map(|k| {
            let section = if k.section == Section::User { "user" } else { "advanced" };
            (k.name.to_string(), section.to_string(), k.env.unwrap_or("-").to_string(), k.default.to_string())
        })
        .collect();
    assert_eq!(rows, code, "docs/config.md and config::KEYS differ");
}

#[test]
fn every_variable_the_parsers_ask_for_is_a_key() {
    let asked = std::cell::RefCell::new(Vec::new());
    let lookup = |k: &str| {
        asked.borrow_mut().push(k.to_string());
        None
    };
    let config = vitamin_runtime::config::Config::from_lookup(lookup);
    let _ = vitamin_runtime::client::coordinator::Settings::from_config(&config, lookup);
    let layers = Layers::default();
    for var in asked.borrow().iter() {
        assert!(
            KEYS.iter().any(|k| k.env == Some(var.as_str()) || k.name == var),
            "{var} is read but is not a configuration key"
        );
        assert_eq!(layers.get(var), None);
    }
    assert!(asked.borrow().len() >= 30, "the parsers were asked: {:?}", asked.borrow());
}

/// The variables read outside the configuration's keys: the file itself, the CLI's interposer
/// directory and backend choice, the HIP runtime library (the interposer and the tests choose it
/// per process), and two test and bench harness outputs. docs/config.md names each under
/// "Outside the file".
const OUTSIDE: &[&str] = &[
    "VITAMIN_CONFIG",
    "VITAMIN_LIB_DIR",
    "VITAMIN_BACKEND",
    "VITAMIN_HIP_LIBRARY",
    "VITAMIN_GRAPH_CENSUS_OUT",
    "VITAMIN_BENCH_JSON",
];

#[test]
fn at_most_twenty_environment_variables_are_read() {
    let env: Vec<&str> = KEYS.iter().filter_map(|k| k.env).chain(OUTSIDE.iter().copied()).collect();
    assert!(env.len() <= 20, "{} VITAMIN_* variables: {env:?}", env.len());
    let mut unique = env.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), env.len(), "a variable is counted twice: {env:?}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md");
    let text = std::fs::read_to_string(path).expect("docs/config.md");
    let (_, outside) = text.split_once("Outside the file").expect("the \"Outside the file\" paragraph");
    for var in OUTSIDE {
        assert!(outside.contains(&format!("`{var}`")), "docs/config.md does not name {var} outside the file");
    }
}

#[test]
fn the_file_sets_values_the_environment_overrides_and_unknown_keys_are_reported() {
    // `launch_first` has no environment variable: its would-be name is ignored.
    let ignored = KEYS.iter().find(|k| k.name == "launch_first").unwrap().var();
    let env = |k: &str| match k {
        "VITAMIN_CONFIG" => Some("/cfg.toml".to_string()),
        "VITAMIN_SEED" => Some("9".to_string()),
        k if k == ignored => Some("1".to_string()),
        _ => None,
    };
    let file = "policy = \"chaos\"\nseed = 7\nbogus = 1\n[advanced]\nlaunch_first = false\nfast_wait = true\n[daemon]\nsocket = \"/run/vitamin.sock\"\n";
    let l = Layers::load(env, |p| {
        assert_eq!(p, std::path::Path::new("/cfg.toml"));
        Ok(file.to_string())
    });
    assert_eq!(l.get("VITAMIN_POLICY").as_deref(), Some("chaos"));
    assert_eq!(l.get("VITAMIN_SEED").as_deref(), Some("9"), "the environment wins");
    assert_eq!(l.get("launch_first").as_deref(), Some("0"), "from the file, as 0/1, not the environment");
    assert_eq!(l.get("fast_wait").as_deref(), Some("1"));
    assert_eq!(l.problems.len(), 1, "{:?}", l.problems);
    assert!(l.problems[0].contains("bogus"));
    let effective = l.effective();
    let source = |name: &str| effective.iter().find(|(k, _, _)| k.name == name).map(|(_, v, s)| (v.clone(), *s));
    use vitamin_runtime::config::Source;
    assert_eq!(source("seed"), Some(("9".to_string(), Source::Env)));
    assert_eq!(source("policy"), Some(("chaos".to_string(), Source::File)));
    assert_eq!(source("mode"), Some(("bind".to_string(), Source::Default)));
    // Bad TOML is a problem, not a failure; `none` means no file.
    let mut bad = Layers::default();
    bad.parse_file("policy = ");
    assert_eq!(bad.problems.len(), 1);
    let none = Layers::load(|k| (k == "VITAMIN_CONFIG").then(|| "none".to_string()), |_| unreachable!("no file read"));
    assert!(none.file.is_none());
}
