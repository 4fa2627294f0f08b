//! `vitamin config`: the effective configuration of a process started from here (the file the
//! interposer would read, the environment), each value with where it came from.

use anyhow::Result;
use vitamin_runtime::config::{self, Section, Source};

/// Prints every key, its value and its source (`default`, `file`, `env`), or JSON.
pub fn run(json: bool) -> Result<()> {
    let layers = config::process();
    let rows = layers.effective();
    if json {
        let keys: Vec<serde_json::Value> = rows
            .iter()
            .map(|(k, v, s)| {
                serde_json::json!({
                    "key": k.name, "section": k.section, "env": k.env, "value": v, "source": s, "default": k.default,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "schema": "vitamin.config.v1",
            "file": layers.file.as_ref().map(|p| p.display().to_string()),
            "problems": layers.problems,
            "keys": keys,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    match &layers.file {
        Some(p) => println!("configuration file: {}", p.display()),
        None => println!(
            "configuration file: none (VITAMIN_CONFIG, ~/.config/vitamin/config.toml, /etc/vitamin/config.toml)"
        ),
    }
    for p in &layers.problems {
        println!("  problem: {p}");
    }
    let mut section = None;
    for (k, v, s) in rows {
        if section != Some(k.section) {
            section = Some(k.section);
            println!("{}", if k.section == Section::User { "\n[user]" } else { "\n[advanced]" });
        }
        let from = match s {
            Source::Default => "default".to_string(),
            Source::File => "file".to_string(),
            Source::Env => format!("env {}", k.env.unwrap_or_default()),
        };
        let shown = if v.is_empty() { "(unset)" } else { v.as_str() };
        println!("  {:<20} {:<12} {from}", k.name, shown);
    }
    Ok(())
}
