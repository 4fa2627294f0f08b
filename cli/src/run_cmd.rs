//! `vitamin run [--bind [--policy P] | --observe] [--census FILE] [--lib-dir DIR] -- <command> [args...]`
//!
//! Runs an unmodified CUDA or HIP application under the interposer so users never type
//! `LD_PRELOAD`: picks the interposer(s) ([`choose`]), finds them (`--lib-dir`, else
//! `VITAMIN_LIB_DIR`, else next to the `vitamin` binary, else `../lib` from it), prepends them to
//! `LD_PRELOAD` (dropping any other copy of each shim), sets `VITAMIN_MODE`, `VITAMIN_CENSUS`
//! (absolute) and `VITAMIN_CENSUS_PID`, and then **replaces itself** with the command (`exec`):
//! the command keeps vitamin's process id, gets signals directly, and its exit status is the
//! exit status of `vitamin run`.
//!
//! ## Which interposer
//! `--backend cuda` preloads `libvitamin_cuda.so`, `--backend hip` `libvitamin_hip.so` (and
//! `sim`, which has no interposer of its own, the CUDA one, as before). With `--backend auto`
//! (the default) the program is inspected ([`inspect`]): an ELF executable whose `DT_NEEDED`
//! closure (its libraries, theirs, ..., found as the dynamic loader finds them: `DT_RPATH` /
//! `DT_RUNPATH` with `$ORIGIN`, `LD_LIBRARY_PATH`, `/etc/ld.so.conf`, the default directories)
//! names `libcuda` or `libcudart` gets the CUDA interposer, one naming `libamdhip64` the HIP one,
//! one naming both gets both. Anything undecidable (a script such as a Python program, an ELF
//! file that names neither, since it may `dlopen` one, as statically linked `cudart` and PyTorch
//! do, a program that cannot be read) gets **both** interposers that are installed: each is
//! inert in a process that never calls its vendor's library (no constructors; state starts at
//! the first intercepted call; `cli/tests/run.rs` runs programs with both preloaded on a machine
//! without a GPU). The choice is printed once, on stderr.
//!
//! Bind mode is the default (`--bind` says so explicitly): every modelled launch is late-bound to the
//! Green Context pool under `--policy` (default: the shim's, `throughput`); `--observe` forwards every
//! call unchanged and only counts. `VITAMIN_MODE` is always set explicitly, so a value inherited
//! from the environment never overrides the flags.
//!
//! The census (see `shim-cuda`'s docs) is written by the main process to FILE at exit; other
//! processes of the application that use CUDA write `FILE.<pid>`; `%p` in FILE is replaced by
//! the process id. A stale FILE from an earlier run is removed before the command starts.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::backends::BackendChoice;

/// File name of the CUDA interposer.
pub const SHIM_FILE: &str = "libvitamin_cuda.so";
/// File name of the HIP interposer.
pub const HIP_SHIM_FILE: &str = "libvitamin_hip.so";

/// Which interposers `vitamin run` preloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interposers {
    /// `libvitamin_cuda.so`.
    Cuda,
    /// `libvitamin_hip.so`.
    Hip,
    /// Both (those installed).
    Both,
}

impl Interposers {
    /// The shim files, in `LD_PRELOAD` order.
    pub fn files(self) -> &'static [&'static str] {
        match self {
            Interposers::Cuda => &[SHIM_FILE],
            Interposers::Hip => &[HIP_SHIM_FILE],
            Interposers::Both => &[SHIM_FILE, HIP_SHIM_FILE],
        }
    }
}

/// What inspecting the program found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspection {
    /// An ELF file: whether its `DT_NEEDED` closure names the CUDA driver or runtime
    /// (`libcuda.so*`, `libcudart.so*`) and HIP (`libamdhip64.so*`), and how many objects were
    /// read.
    Elf {
        /// A CUDA library is named.
        cuda: bool,
        /// `libamdhip64` is named.
        hip: bool,
        /// Objects read (the program and the libraries found).
        objects: usize,
    },
    /// A script (`#!`), with its interpreter line.
    Script(String),
    /// Not ELF, not a script, or not readable: why.
    Unknown(String),
}

/// The vendor library a `DT_NEEDED` name stands for: `Some(true)` CUDA (`libcuda.so*`,
/// `libcudart.so*`), `Some(false)` HIP (`libamdhip64.so*`), `None` neither.
pub fn vendor_library(needed: &str) -> Option<bool> {
    let file = needed.rsplit('/').next().unwrap_or(needed);
    let is = |stem: &str| file == stem || file.strip_prefix(stem).is_some_and(|rest| rest.starts_with('.'));
    if is("libcuda.so") || is("libcudart.so") {
        Some(true)
    } else if is("libamdhip64.so") {
        Some(false)
    } else {
        None
    }
}

/// The interposers for `choice` and what inspecting the program found (asked for only with
/// `auto`), with the reason, as printed.
pub fn choose(choice: BackendChoice, inspection: impl FnOnce() -> Inspection) -> (Interposers, String) {
    match choice {
        BackendChoice::Cuda => (Interposers::Cuda, "--backend cuda".into()),
        BackendChoice::Hip => (Interposers::Hip, "--backend hip".into()),
        BackendChoice::Sim => (Interposers::Cuda, "--backend sim".into()),
        BackendChoice::Auto => match inspection() {
            Inspection::Elf { cuda: true, hip: false, .. } => (Interposers::Cuda, "the program links CUDA".into()),
            Inspection::Elf { cuda: false, hip: true, .. } => (Interposers::Hip, "the program links HIP".into()),
            Inspection::Elf { cuda: true, hip: true, .. } => {
                (Interposers::Both, "the program links CUDA and HIP".into())
            }
            Inspection::Elf { objects, .. } => (
                Interposers::Both,
                format!("the program's {objects} ELF objects link neither CUDA nor HIP (it may load one at run time)"),
            ),
            Inspection::Script(interpreter) => (Interposers::Both, format!("a script ({interpreter})")),
            Inspection::Unknown(why) => (Interposers::Both, why),
        },
    }
}

/// The most objects [`inspect`] reads.
const MAX_OBJECTS: usize = 512;

/// The `DT_NEEDED` names and the `DT_RPATH` / `DT_RUNPATH` directories of one ELF object.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dynamic {
    /// `DT_NEEDED`, in order.
    pub needed: Vec<String>,
    /// `DT_RPATH` and `DT_RUNPATH` entries, as written (`$ORIGIN` not yet replaced).
    pub search: Vec<String>,
}

/// The dynamic section of the ELF object in `data` (64- or 32-bit, either byte order); `None`
/// when `data` is not an ELF object this can read. A static executable has an empty one.
pub fn dynamic_of<'a, R: object::ReadRef<'a>>(data: R) -> Option<Dynamic> {
    let ident = data.read_bytes_at(0, 5).ok()?;
    if &ident[..4] != b"\x7fELF" {
        return None;
    }
    match ident[4] {
        object::elf::ELFCLASS64 => dynamic_with::<object::elf::FileHeader64<object::Endianness>, R>(data),
        object::elf::ELFCLASS32 => dynamic_with::<object::elf::FileHeader32<object::Endianness>, R>(data),
        _ => None,
    }
}

fn dynamic_with<'a, H, R>(data: R) -> Option<Dynamic>
where
    H: object::read::elf::FileHeader<Endian = object::Endianness>,
    R: object::ReadRef<'a>,
{
    use object::read::elf::Dyn;
    let header = H::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, data).ok()?;
    let mut out = Dynamic::default();
    let Some((entries, link)) = sections.dynamic(endian, data).ok()? else { return Some(out) };
    let strings = sections.strings(endian, data, link).ok()?;
    for d in entries {
        let tag: u64 = d.d_tag(endian).into();
        let value: u64 = d.d_val(endian).into();
        if tag == u64::from(object::elf::DT_NULL) {
            break;
        }
        let text = || {
            let offset = u32::try_from(value).ok()?;
            strings.get(offset).ok().map(|b| String::from_utf8_lossy(b).into_owned())
        };
        match u32::try_from(tag) {
            Ok(object::elf::DT_NEEDED) => out.needed.extend(text()),
            Ok(object::elf::DT_RPATH | object::elf::DT_RUNPATH) => {
                out.search.extend(text().iter().flat_map(|t| t.split(':').map(str::to_owned).collect::<Vec<_>>()))
            }
            _ => {}
        }
    }
    Some(out)
}

/// The directories a `ld.so.conf` file at `path` lists, following its `include` lines (a file,
/// or a glob of the form `DIR/*SUFFIX`, files in name order) up to three levels deep.
pub fn ld_so_conf_dirs(path: &Path) -> Vec<PathBuf> {
    fn conf(path: &Path, out: &mut Vec<PathBuf>, depth: usize) {
        let Ok(text) = std::fs::read_to_string(path) else { return };
        for line in text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()) {
            if let Some(pattern) = line.strip_prefix("include").map(str::trim) {
                let (dir, suffix) = match pattern.rsplit_once("/*") {
                    Some((d, s)) => (PathBuf::from(d), s.to_owned()),
                    None => (PathBuf::from(pattern), String::new()),
                };
                if depth > 2 {
                    continue;
                }
                if suffix.is_empty() && dir.is_file() {
                    conf(&dir, out, depth + 1);
                    continue;
                }
                let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                    .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(&suffix)).collect())
                    .unwrap_or_default();
                files.sort();
                for f in files {
                    conf(&f, out, depth + 1);
                }
            } else {
                out.push(PathBuf::from(line));
            }
        }
    }
    let mut dirs = Vec::new();
    conf(path, &mut dirs, 0);
    dirs
}

/// The directories the dynamic loader searches after the objects' own paths: those of
/// `/etc/ld.so.conf` and the defaults.
fn system_dirs() -> Vec<PathBuf> {
    let mut dirs = ld_so_conf_dirs(Path::new("/etc/ld.so.conf"));
    for d in ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// The file `name` (a `DT_NEEDED` entry of the object at `from`, whose own search directories
/// are `search`) resolves to: a path as given, else the first readable ELF object named so in
/// `search` (`$ORIGIN` replaced), `LD_LIBRARY_PATH`, then the system directories.
fn resolve(name: &str, from: &Path, search: &[String], env_dirs: &[PathBuf], system: &[PathBuf]) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    let origin = from.parent().unwrap_or(Path::new("/")).to_string_lossy().into_owned();
    let own = search.iter().map(|d| PathBuf::from(d.replace("$ORIGIN", &origin).replace("${ORIGIN}", &origin)));
    own.chain(env_dirs.iter().cloned()).chain(system.iter().cloned()).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The program `command` names: a path if it has a `/`, else the first executable file of that
/// name on `PATH`.
pub fn program_path(command: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let p = Path::new(command);
    if command.as_encoded_bytes().contains(&b'/') {
        return Some(p.to_path_buf());
    }
    std::env::split_paths(path_var?)
        .map(|d| d.join(p))
        .find(|c| c.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Inspects `program`: a script, or an ELF object and its `DT_NEEDED` closure (breadth first,
/// at most [`MAX_OBJECTS`] objects, stopping once both vendors are found). `ld_library_path`:
/// the `LD_LIBRARY_PATH` the command will run with.
pub fn inspect(program: &Path, ld_library_path: Option<&OsStr>) -> Inspection {
    let unreadable = |e: std::io::Error| Inspection::Unknown(format!("{} cannot be read ({e})", program.display()));
    let file = match std::fs::File::open(program) {
        Ok(f) => f,
        Err(e) => return unreadable(e),
    };
    let mut head = [0u8; 128];
    let n = {
        use std::io::Read;
        match (&file).take(head.len() as u64).read(&mut head) {
            Ok(n) => n,
            Err(e) => return unreadable(e),
        }
    };
    if head[..n].starts_with(b"#!") {
        let line = String::from_utf8_lossy(&head[2..n]);
        return Inspection::Script(line.lines().next().unwrap_or("").trim().to_owned());
    }
    let env_dirs: Vec<PathBuf> = ld_library_path.map(|v| std::env::split_paths(v).collect()).unwrap_or_default();
    let system = system_dirs();
    let (mut cuda, mut hip, mut objects) = (false, false, 0);
    let mut queue = std::collections::VecDeque::from([program.to_path_buf()]);
    let mut seen = std::collections::HashSet::new();
    while let Some(path) = queue.pop_front() {
        if objects >= MAX_OBJECTS || (cuda && hip) {
            break;
        }
        if !seen.insert(std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone())) {
            continue;
        }
        let Ok(f) = std::fs::File::open(&path) else { continue };
        let cache = object::ReadCache::new(f);
        let Some(dynamic) = dynamic_of(&cache) else {
            if objects == 0 {
                return Inspection::Unknown(format!("{} is neither an ELF file nor a script", program.display()));
            }
            continue;
        };
        objects += 1;
        for name in &dynamic.needed {
            match vendor_library(name) {
                Some(true) => cuda = true,
                Some(false) => hip = true,
                None => queue.extend(resolve(name, &path, &dynamic.search, &env_dirs, &system)),
            }
        }
    }
    Inspection::Elf { cuda, hip, objects }
}

/// Arguments of `vitamin run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Observe mode: forward every CUDA call unchanged and only count calls and kernel launches (no
    /// late binding).
    #[arg(long, conflicts_with = "bind")]
    pub observe: bool,
    /// Bind mode (the default): late-bind every modelled launch, unchanged, to the Green Context
    /// pool; docs/shim.md lists what is modelled and what still runs natively.
    #[arg(long)]
    pub bind: bool,
    /// Policy in bind mode: throughput (the shim's default), tpot, static, exclusive or chaos.
    #[arg(long, conflicts_with = "observe", value_name = "POLICY")]
    pub policy: Option<String>,
    /// Write the census JSON (calls per API, launches per kernel) here at exit; `%p` = pid.
    #[arg(long, value_name = "FILE")]
    pub census: Option<PathBuf>,
    /// The coordination daemon's socket (default: the daemon's default path). Bind mode uses a
    /// daemon that answers there, else decides in-process; named explicitly, a daemon that does
    /// not answer is an error.
    #[arg(long, env = "VITAMIN_DAEMON", value_name = "SOCKET", conflicts_with = "observe")]
    pub daemon: Option<PathBuf>,
    /// Decide in-process even if a daemon runs.
    #[arg(long, conflicts_with = "daemon")]
    pub no_daemon: bool,
    /// The class the daemon schedules this process as: batch (best effort, the default) or
    /// latency (TPOT-First reserves for it).
    #[arg(long, value_name = "CLASS", value_parser = ["batch", "latency"])]
    pub class: Option<String>,
    /// Per-token (per-step) target of a latency-class process, ms.
    #[arg(long, value_name = "MS")]
    pub tpot_ms: Option<f64>,
    /// Directory holding libvitamin_cuda.so / libvitamin_hip.so (default: next to the vitamin binary).
    #[arg(long, env = "VITAMIN_LIB_DIR", value_name = "DIR")]
    pub lib_dir: Option<PathBuf>,
    /// The command to run and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// What `vitamin run` will execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Environment variables to set (everything else is inherited).
    pub env: Vec<(String, OsString)>,
}

/// `LD_PRELOAD` with `lib` first, keeping every other entry in order and dropping other copies
/// of the same shim (glibc accepts ':' and whitespace as separators).
pub fn prepend_preload(existing: Option<&OsStr>, lib: &Path) -> OsString {
    let shim = lib.file_name().unwrap_or(OsStr::new(SHIM_FILE));
    let mut out = OsString::from(lib.as_os_str());
    let existing = existing.map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    for entry in existing.split(|c: char| c == ':' || c.is_whitespace()).filter(|e| !e.is_empty()) {
        if Path::new(entry).file_name() == Some(shim) {
            continue;
        }
        out.push(":");
        out.push(entry);
    }
    out
}

/// The execution plan: pure, so it is testable without starting anything.
///
/// `daemon`: the socket of a daemon that answered (bind mode then uses it); `None`: in-process.
pub fn plan(
    args: &RunArgs,
    libs: &[&Path],
    existing_preload: Option<&OsStr>,
    cwd: &Path,
    pid: u32,
    daemon: Option<&Path>,
) -> Result<Plan> {
    if args.observe && (args.bind || args.policy.is_some()) {
        bail!("--observe forwards every call unchanged: it takes neither --bind nor --policy");
    }
    let (program, rest) = args.command.split_first().context("no command given: vitamin run -- <command>")?;
    let mode = mode_of(args);
    // Prepended last to first, so that the first comes first.
    let preload = libs
        .iter()
        .rev()
        .fold(existing_preload.map(OsStr::to_os_string), |acc, lib| Some(prepend_preload(acc.as_deref(), lib)));
    let mut env = vec![
        ("LD_PRELOAD".to_string(), preload.context("no interposer to preload")?),
        ("VITAMIN_MODE".to_string(), OsString::from(mode)),
        ("VITAMIN_CENSUS_PID".to_string(), OsString::from(pid.to_string())),
    ];
    if let Some(p) = &args.policy {
        let kind: vitamin_runtime::policy::PolicyKind = p.parse().map_err(|e: String| anyhow::anyhow!(e))?;
        env.push(("VITAMIN_POLICY".to_string(), OsString::from(kind.name())));
    }
    if let Some(census) = &args.census {
        env.push(("VITAMIN_CENSUS".to_string(), cwd.join(census).into_os_string()));
    }
    // Always set, so that an inherited value never overrides the choice made here.
    env.push(("VITAMIN_DAEMON".to_string(), daemon.map(|d| cwd.join(d).into_os_string()).unwrap_or_default()));
    if args.tpot_ms.is_some() && args.class.as_deref() != Some("latency") {
        bail!("--tpot-ms is the target of a latency-class process: add --class latency");
    }
    match (&args.class, args.tpot_ms) {
        (_, Some(ms)) if !(ms.is_finite() && ms > 0.0) => bail!("--tpot-ms must be a positive number of milliseconds"),
        (Some(c), Some(ms)) => env.push(("VITAMIN_CLASS".to_string(), OsString::from(format!("{c}:{ms}")))),
        (Some(c), None) => env.push(("VITAMIN_CLASS".to_string(), OsString::from(c))),
        (None, _) => {}
    }
    Ok(Plan { program: program.clone(), args: rest.to_vec(), env })
}

/// The mode `vitamin run` sets: bind unless `--observe`.
pub fn mode_of(args: &RunArgs) -> &'static str {
    if args.observe {
        "observe"
    } else {
        "bind"
    }
}

/// Where to look for the shim, in order.
pub fn search_dirs(lib_dir: Option<&Path>, exe: Option<&Path>) -> Vec<PathBuf> {
    if let Some(d) = lib_dir {
        return vec![d.to_path_buf()];
    }
    let mut dirs = Vec::new();
    if let Some(bin) = exe.and_then(Path::parent) {
        dirs.push(bin.to_path_buf());
        if let Some(prefix) = bin.parent() {
            dirs.push(prefix.join("lib"));
        }
    }
    dirs
}

/// The absolute path of shim `file`.
pub fn find_shim(dirs: &[PathBuf], file: &str) -> Result<PathBuf> {
    for d in dirs {
        let p = d.join(file);
        if p.is_file() {
            return std::path::absolute(&p).with_context(|| format!("cannot make {} absolute", p.display()));
        }
    }
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    bail!(
        "{file} not found (looked in: {}); build it with `cargo build --release -p {}` \
         and keep it next to the vitamin binary, or point --lib-dir / VITAMIN_LIB_DIR at its directory",
        if searched.is_empty() { "nowhere: no vitamin binary path".to_string() } else { searched.join(", ") },
        if file == HIP_SHIM_FILE { "vitamin-shim-hip" } else { "vitamin-shim-cuda" }
    )
}

/// The absolute paths of the interposers `which` names: each must be found, except with
/// [`Interposers::Both`], where those installed are taken (at least one).
pub fn find_shims(dirs: &[PathBuf], which: Interposers) -> Result<Vec<PathBuf>> {
    let found: Vec<Result<PathBuf>> = which.files().iter().map(|f| find_shim(dirs, f)).collect();
    if which != Interposers::Both || found.iter().all(Result::is_err) {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for r in found {
            match r {
                Ok(p) => out.push(p),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if errors.is_empty() {
            return Ok(out);
        }
        bail!("{}", errors.join("; "));
    }
    Ok(found.into_iter().flatten().collect())
}

/// Whether bind mode runs under a daemon: one named with `--daemon` (or `VITAMIN_DAEMON`) must
/// answer; otherwise the default socket is tried. Says which, once, on stderr.
fn choose_daemon(args: &RunArgs) -> Result<Option<PathBuf>> {
    if args.observe {
        return Ok(None);
    }
    if args.no_daemon {
        eprintln!("vitamin run: in-process (--no-daemon): this process decides its bindings alone");
        return Ok(None);
    }
    // --daemon (or VITAMIN_DAEMON), else the file's `daemon` key, else its [daemon] socket, else
    // the daemon's default path.
    let (socket, explicit) = match &args.daemon {
        Some(s) if !s.as_os_str().is_empty() => (s.clone(), true),
        _ => {
            let file_key = vitamin_runtime::config::process().get("VITAMIN_DAEMON").filter(|s| !s.trim().is_empty());
            let section = crate::daemon_cmd::file_section()?.1.socket;
            match (file_key, section) {
                (Some(k), _) => (PathBuf::from(k.trim()), true),
                (None, Some(s)) => (s, false),
                (None, None) => (vitamin_runtime::daemon::transport::default_socket_path(), false),
            }
        }
    };
    match vitamin_runtime::daemon::client::status(&socket, std::time::Duration::from_millis(500)) {
        Ok(st) => {
            eprintln!(
                "vitamin run: sharing the GPU through the vitamin daemon at {} (policy {}, {} other clients)",
                socket.display(),
                st.policy,
                st.clients.len()
            );
            Ok(Some(socket))
        }
        Err(e) if explicit => bail!("--daemon {}: {e}", socket.display()),
        Err(_) => {
            eprintln!(
                "vitamin run: in-process (no vitamin daemon at {}): this process decides its bindings alone",
                socket.display()
            );
            Ok(None)
        }
    }
}

/// Runs `vitamin run` with the interposer of backend `choice`: never returns on success (the
/// process becomes the command).
pub fn run(args: RunArgs, choice: BackendChoice) -> Result<()> {
    let exe = std::env::current_exe().ok();
    let (which, why) = choose(choice, || {
        let program = args.command.first().map(OsString::as_os_str).unwrap_or_default();
        match program_path(program, std::env::var_os("PATH").as_deref()) {
            Some(p) => inspect(&p, std::env::var_os("LD_LIBRARY_PATH").as_deref()),
            None => Inspection::Unknown(format!("{} not found on PATH", Path::new(program).display())),
        }
    });
    let libs = find_shims(&search_dirs(args.lib_dir.as_deref(), exe.as_deref()), which)?;
    let names: Vec<String> =
        libs.iter().map(|l| l.file_name().unwrap_or_default().to_string_lossy().into_owned()).collect();
    eprintln!("vitamin run: preloading {} ({why})", names.join(" and "));
    let libs: Vec<&Path> = libs.iter().map(PathBuf::as_path).collect();
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let daemon = choose_daemon(&args)?;
    let plan =
        plan(&args, &libs, std::env::var_os("LD_PRELOAD").as_deref(), &cwd, std::process::id(), daemon.as_deref())?;
    if let Some((_, census)) = plan.env.iter().find(|(k, _)| k == "VITAMIN_CENSUS") {
        if !census.to_string_lossy().contains("%p") {
            match std::fs::remove_file(census) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => bail!("cannot remove the stale census {}: {e}", Path::new(census).display()),
            }
        }
    }
    tracing::info!(shims = ?names, program = ?plan.program, mode = mode_of(&args), "vitamin run");
    exec(plan)
}

#[cfg(unix)]
fn exec(plan: Plan) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&plan.program);
    cmd.args(&plan.args).envs(plan.env.iter().map(|(k, v)| (k, v)));
    let err = cmd.exec();
    let code = match err.kind() {
        std::io::ErrorKind::NotFound => 127,
        std::io::ErrorKind::PermissionDenied => 126,
        _ => 1,
    };
    eprintln!("vitamin run: cannot execute {:?}: {err}", plan.program);
    std::process::exit(code);
}

#[cfg(not(unix))]
fn exec(_plan: Plan) -> Result<()> {
    bail!("vitamin run needs LD_PRELOAD, which exists on Linux only")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(observe: bool, census: Option<&str>, command: &[&str]) -> RunArgs {
        RunArgs {
            observe,
            bind: false,
            policy: None,
            census: census.map(PathBuf::from),
            daemon: None,
            no_daemon: false,
            class: None,
            tpot_ms: None,
            lib_dir: None,
            command: command.iter().map(OsString::from).collect(),
        }
    }

    #[test]
    fn preload_is_prepended_and_deduplicated() {
        let lib = Path::new("/opt/v/libvitamin_cuda.so");
        assert_eq!(prepend_preload(None, lib), "/opt/v/libvitamin_cuda.so");
        assert_eq!(prepend_preload(Some(OsStr::new("")), lib), "/opt/v/libvitamin_cuda.so");
        assert_eq!(
            prepend_preload(Some(OsStr::new("/a/liba.so /old/libvitamin_cuda.so:/b/libb.so")), lib),
            "/opt/v/libvitamin_cuda.so:/a/liba.so:/b/libb.so"
        );
    }

    #[test]
    fn observe_plan_sets_the_environment() {
        let p = plan(
            &args(true, Some("out/census.json"), &["python3", "-c", "print(1)"]),
            &[Path::new("/lib/libvitamin_cuda.so")],
            Some(OsStr::new("/x/libx.so")),
            Path::new("/work"),
            4242,
            None,
        )
        .unwrap();
        assert_eq!(p.program, "python3");
        assert_eq!(p.args, vec![OsString::from("-c"), OsString::from("print(1)")]);
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("LD_PRELOAD").unwrap(), "/lib/libvitamin_cuda.so:/x/libx.so");
        assert_eq!(get("VITAMIN_MODE").unwrap(), "observe");
        assert_eq!(get("VITAMIN_CENSUS").unwrap(), "/work/out/census.json");
        assert_eq!(get("VITAMIN_CENSUS_PID").unwrap(), "4242");
        let no_census =
            plan(&args(true, None, &["true"]), &[Path::new("/l/libvitamin_cuda.so")], None, Path::new("/"), 1, None);
        assert!(no_census.unwrap().env.iter().all(|(k, _)| k != "VITAMIN_CENSUS"));
    }

    #[test]
    fn bind_mode_sets_mode_and_policy() {
        let mut a = args(false, None, &["true"]);
        a.bind = true;
        a.policy = Some("Chaos".into());
        let p = plan(&a, &[Path::new("/l/libvitamin_cuda.so")], None, Path::new("/"), 1, None).expect("plan");
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("VITAMIN_MODE").unwrap(), "bind");
        assert_eq!(get("VITAMIN_POLICY").unwrap(), "chaos");
        a.policy = Some("fastest".into());
        assert!(
            plan(&a, &[Path::new("/l/libvitamin_cuda.so")], None, Path::new("/"), 1, None).is_err(),
            "unknown policy"
        );
    }

    #[test]
    fn daemon_and_class_reach_the_environment() {
        let lib: &[&Path] = &[Path::new("/l/libvitamin_cuda.so")];
        let get = |p: &Plan, k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let p = plan(&args(false, None, &["true"]), lib, None, Path::new("/w"), 1, None).expect("plan");
        assert_eq!(get(&p, "VITAMIN_DAEMON").unwrap(), "", "in-process overrides an inherited socket");
        let mut a = args(false, None, &["true"]);
        a.class = Some("latency".into());
        a.tpot_ms = Some(25.0);
        let p = plan(&a, lib, None, Path::new("/w"), 1, Some(Path::new("d.sock"))).expect("plan");
        assert_eq!(get(&p, "VITAMIN_DAEMON").unwrap(), "/w/d.sock");
        assert_eq!(get(&p, "VITAMIN_CLASS").unwrap(), "latency:25");
        a.class = None;
        let err = plan(&a, lib, None, Path::new("/w"), 1, None).unwrap_err().to_string();
        assert!(err.contains("--class latency"), "{err}");
        a.class = Some("latency".into());
        a.tpot_ms = Some(-1.0);
        assert!(plan(&a, lib, None, Path::new("/w"), 1, None).is_err(), "a negative target");
    }

    #[test]
    fn bind_is_the_default_mode() {
        let lib: &[&Path] = &[Path::new("/l/libvitamin_cuda.so")];
        let p = plan(&args(false, None, &["true"]), lib, None, Path::new("/"), 1, None).expect("plan");
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("VITAMIN_MODE").unwrap(), "bind");
        assert_eq!(get("VITAMIN_POLICY"), None, "the shim's default policy");
        // A policy without --bind is bind mode with that policy.
        let mut a = args(false, None, &["true"]);
        a.policy = Some("static".into());
        let p = plan(&a, lib, None, Path::new("/"), 1, None).expect("plan");
        assert!(p.env.contains(&("VITAMIN_MODE".to_string(), OsString::from("bind"))));
        assert!(p.env.contains(&("VITAMIN_POLICY".to_string(), OsString::from("static"))));
        // --observe takes no policy.
        a.observe = true;
        let err = plan(&a, lib, None, Path::new("/"), 1, None).unwrap_err().to_string();
        assert!(err.contains("--observe") && err.contains("--policy"), "{err}");
    }

    #[test]
    fn shim_is_found_in_the_search_order() {
        let root = std::env::temp_dir().join(format!("vitamin-run-test-{}", std::process::id()));
        let bin = root.join("bin");
        let lib = root.join("lib");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        let exe = bin.join("vitamin");
        let dirs = search_dirs(None, Some(&exe));
        assert_eq!(dirs, vec![bin.clone(), lib.clone()]);
        let err = find_shim(&dirs, SHIM_FILE).unwrap_err().to_string();
        assert!(err.contains("not found") && err.contains("VITAMIN_LIB_DIR"), "{err}");
        std::fs::write(lib.join(SHIM_FILE), b"").unwrap();
        assert_eq!(find_shim(&dirs, SHIM_FILE).unwrap(), lib.join(SHIM_FILE));
        std::fs::write(bin.join(SHIM_FILE), b"").unwrap();
        assert_eq!(find_shim(&dirs, SHIM_FILE).unwrap(), bin.join(SHIM_FILE), "next to the binary wins");
        let err = find_shim(&dirs, HIP_SHIM_FILE).unwrap_err().to_string();
        assert!(err.contains(HIP_SHIM_FILE) && err.contains("-p vitamin-shim-hip"), "{err}");
        std::fs::write(lib.join(HIP_SHIM_FILE), b"").unwrap();
        assert_eq!(find_shim(&dirs, HIP_SHIM_FILE).unwrap(), lib.join(HIP_SHIM_FILE));
        assert_eq!(search_dirs(Some(&lib), Some(&exe)), vec![lib.clone()], "--lib-dir overrides");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_backend_or_the_program_picks_the_interposers() {
        let never = || -> Inspection { panic!("the program is inspected only for auto") };
        assert_eq!(choose(BackendChoice::Hip, never).0, Interposers::Hip);
        assert_eq!(choose(BackendChoice::Cuda, never).0, Interposers::Cuda);
        assert_eq!(choose(BackendChoice::Sim, never).0, Interposers::Cuda);
        let elf = |cuda, hip| move || Inspection::Elf { cuda, hip, objects: 3 };
        assert_eq!(choose(BackendChoice::Auto, elf(true, false)).0, Interposers::Cuda);
        assert_eq!(choose(BackendChoice::Auto, elf(false, true)).0, Interposers::Hip);
        assert_eq!(choose(BackendChoice::Auto, elf(true, true)).0, Interposers::Both);
        let (both, why) = choose(BackendChoice::Auto, elf(false, false));
        assert_eq!(both, Interposers::Both);
        assert!(why.contains("neither"), "{why}");
        let (both, why) = choose(BackendChoice::Auto, || Inspection::Script("/usr/bin/env python3".into()));
        assert_eq!((both, why.as_str()), (Interposers::Both, "a script (/usr/bin/env python3)"));
        assert_eq!(choose(BackendChoice::Auto, || Inspection::Unknown("x".into())).0, Interposers::Both);
        assert_eq!(Interposers::Both.files(), [SHIM_FILE, HIP_SHIM_FILE]);
        // Each shim replaces only its own earlier copies.
        let hip = Path::new("/new/libvitamin_hip.so");
        let out = prepend_preload(Some(OsStr::new("/old/libvitamin_hip.so:/old/libvitamin_cuda.so")), hip);
        assert_eq!(out, "/new/libvitamin_hip.so:/old/libvitamin_cuda.so");
    }

    #[test]
    fn vendor_libraries_by_name() {
        for cuda in ["libcuda.so", "libcuda.so.1", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so.13.0.48"] {
            assert_eq!(vendor_library(cuda), Some(true), "{cuda}");
        }
        for hip in ["libamdhip64.so", "libamdhip64.so.5", "libamdhip64.so.6.2.41133"] {
            assert_eq!(vendor_library(hip), Some(false), "{hip}");
        }
        for other in ["libcudnn.so.9", "libcuda_stub.so", "libcudart_static.a", "libamdhip64x.so", "libc.so.6", ""] {
            assert_eq!(vendor_library(other), None, "{other}");
        }
    }

    #[test]
    fn both_takes_the_installed_interposers_and_one_must_be_installed() {
        let root = std::env::temp_dir().join(format!("vitamin-run-both-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let dirs = vec![root.clone()];
        let err = find_shims(&dirs, Interposers::Both).unwrap_err().to_string();
        assert!(err.contains("libvitamin_cuda.so not found") && err.contains("libvitamin_hip.so not found"), "{err}");
        std::fs::write(root.join(HIP_SHIM_FILE), b"").unwrap();
        assert_eq!(find_shims(&dirs, Interposers::Both).unwrap(), [root.join(HIP_SHIM_FILE)]);
        assert!(find_shims(&dirs, Interposers::Cuda).is_err(), "a forced interposer must be installed");
        std::fs::write(root.join(SHIM_FILE), b"").unwrap();
        assert_eq!(find_shims(&dirs, Interposers::Both).unwrap(), [root.join(SHIM_FILE), root.join(HIP_SHIM_FILE)]);
        let p = plan(
            &args(false, None, &["true"]),
            &[&root.join(SHIM_FILE), &root.join(HIP_SHIM_FILE)],
            Some(OsStr::new("/x/libx.so:/old/libvitamin_hip.so")),
            Path::new("/"),
            1,
            None,
        )
        .unwrap();
        let preload = &p.env.iter().find(|(k, _)| k == "LD_PRELOAD").unwrap().1;
        let want = format!("{}:{}:/x/libx.so", root.join(SHIM_FILE).display(), root.join(HIP_SHIM_FILE).display());
        assert_eq!(preload, &OsString::from(want));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn scripts_and_non_elf_files_are_undecidable() {
        let root = std::env::temp_dir().join(format!("vitamin-run-inspect-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("train.py"), b"#!/usr/bin/env python3\nimport torch\n").unwrap();
        assert_eq!(inspect(&root.join("train.py"), None), Inspection::Script("/usr/bin/env python3".into()));
        std::fs::write(root.join("data.bin"), b"\x7fELF\x02garbage").unwrap();
        assert!(matches!(inspect(&root.join("data.bin"), None), Inspection::Unknown(_)));
        std::fs::write(root.join("empty"), b"").unwrap();
        assert!(matches!(inspect(&root.join("empty"), None), Inspection::Unknown(_)));
        assert!(matches!(inspect(&root.join("missing"), None), Inspection::Unknown(_)));
        std::fs::remove_dir_all(&root).unwrap();
    }

    proptest::proptest! {
        /// Hostile bytes behind an ELF magic (any class, any byte order) never panic the reader.
        #[test]
        fn hostile_elf_bytes_are_never_a_panic(
            class in 0u8..4,
            order in 0u8..3,
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048),
        ) {
            let mut data = b"\x7fELF".to_vec();
            data.extend([class, order]);
            data.extend(bytes);
            let _ = dynamic_of(data.as_slice());
        }
    }

    #[test]
    fn ld_so_conf_includes_are_followed() {
        let root = std::env::temp_dir().join(format!("vitamin-run-ldconf-{}", std::process::id()));
        let d = root.join("ld.so.conf.d");
        std::fs::create_dir_all(&d).unwrap();
        let top = format!("# comment\n/opt/first\ninclude {}/*.conf\n/opt/last # trailing\n", d.display());
        std::fs::write(root.join("ld.so.conf"), top).unwrap();
        std::fs::write(d.join("b.conf"), "/opt/b\n").unwrap();
        std::fs::write(d.join("a.conf"), "/opt/a1\n\n/opt/a2\n").unwrap();
        std::fs::write(d.join("ignored.txt"), "/opt/not\n").unwrap();
        let got = ld_so_conf_dirs(&root.join("ld.so.conf"));
        let want: Vec<PathBuf> = ["/opt/first", "/opt/a1", "/opt/a2", "/opt/b", "/opt/last"].map(PathBuf::from).into();
        assert_eq!(got, want);
        assert!(ld_so_conf_dirs(&root.join("missing.conf")).is_empty());
        // A file that includes itself stops at the depth bound.
        std::fs::write(root.join("loop.conf"), format!("/opt/x\ninclude {}\n", root.join("loop.conf").display()))
            .unwrap();
        assert_eq!(ld_so_conf_dirs(&root.join("loop.conf")).len(), 4);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_dynamic_section_of_a_real_executable() {
        let exe = std::env::current_exe().unwrap();
        let cache = object::ReadCache::new(std::fs::File::open(&exe).unwrap());
        let d = dynamic_of(&cache).expect("the test binary is an ELF object");
        assert!(d.needed.iter().any(|n| n == "libc.so.6"), "{d:?}");
        assert_eq!(dynamic_of(b"#!/bin/sh\n".as_slice()), None);
    }

    #[test]
    fn this_test_binary_links_neither_vendor() {
        let exe = std::env::current_exe().unwrap();
        match inspect(&exe, None) {
            Inspection::Elf { cuda, hip, objects } => {
                assert!(!cuda && !hip && objects >= 2, "{cuda} {hip} {objects}: the test binary and its libc at least");
            }
            other => panic!("{other:?}"),
        }
        assert!(program_path(OsStr::new("sh"), Some(OsStr::new("/nonexistent:/bin:/usr/bin"))).is_some());
        assert_eq!(program_path(OsStr::new("vitamin-no-such-program"), Some(OsStr::new("/bin"))), None);
        assert_eq!(program_path(OsStr::new("./x"), None), Some(PathBuf::from("./x")));
    }

    /// Exhaustive over a small domain: 0..=4 entries, the old shim at every position or absent,
    /// both separators. The shim comes first exactly once; every other entry survives in order.
    #[test]
    fn preload_keeps_other_entries() {
        let pool = ["/a/liba.so", "/b/libb.so", "/c/libc.so", "/d/libd.so"];
        let lib = Path::new("/new/libvitamin_cuda.so");
        for n in 0..=pool.len() {
            let entries = &pool[..n];
            for shim_at in (0..=n).map(Some).chain([None]) {
                for sep in [":", " ", " : "] {
                    let mut list: Vec<&str> = entries.to_vec();
                    if let Some(i) = shim_at {
                        list.insert(i, "/old/libvitamin_cuda.so");
                    }
                    let out = prepend_preload(Some(OsStr::new(&list.join(sep))), lib).into_string().unwrap();
                    let parts: Vec<&str> = out.split(':').collect();
                    assert_eq!(parts[0], "/new/libvitamin_cuda.so");
                    assert_eq!(parts.iter().filter(|p| p.ends_with(SHIM_FILE)).count(), 1, "{out}");
                    assert_eq!(&parts[1..], entries, "{out}");
                }
            }
        }
    }
}
