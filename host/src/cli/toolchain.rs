//! The toolchains that build Python and JavaScript plugins: componentize-py in a venv and
//! componentize-js in a local `node_modules`, installed on first use from PyPI and npm and cached
//! under `~/.cache/wasmformer/<tool>/<key>`, where the key hashes the pins (compiled into this
//! binary from `guest-sdk/`) and the interpreter's version. A fresh machine (CI's clone) installs
//! them itself; later builds find them in a few milliseconds. An install that was interrupted
//! leaves no `.ready` marker and is redone; concurrent installs wait on a file lock.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

/// The contract's WIT files the Python and JavaScript SDKs are built against (staged beside every
/// non-Rust build): the current contract (`wit/`), writer included.
pub const WIT: &[(&str, &str)] = &[
    ("handler.wit", include_str!("../../../wit/handler.wit")),
    ("lister.wit", include_str!("../../../wit/lister.wit")),
    ("log.wit", include_str!("../../../wit/log.wit")),
    (
        "reconciler.wit",
        include_str!("../../../wit/reconciler.wit"),
    ),
    ("retry.wit", include_str!("../../../wit/retry.wit")),
    ("state.wit", include_str!("../../../wit/state.wit")),
    ("types.wit", include_str!("../../../wit/types.wit")),
    ("world.wit", include_str!("../../../wit/world.wit")),
    ("writer.wit", include_str!("../../../wit/writer.wit")),
];

/// The Python SDK (`guest-sdk/python/wasmformer/`), staged as the package `wasmformer`.
pub const PYTHON_SDK: &[(&str, &str)] = &[
    (
        "wasmformer/__init__.py",
        include_str!("../../../guest-sdk/python/wasmformer/__init__.py"),
    ),
    (
        "wasmformer/writer.py",
        include_str!("../../../guest-sdk/python/wasmformer/writer.py"),
    ),
];

/// The JavaScript SDK (`guest-sdk/js/wasmformer.js`), staged as `wasmformer.js`.
pub const JS_SDK: &[(&str, &str)] = &[(
    "wasmformer.js",
    include_str!("../../../guest-sdk/js/wasmformer.js"),
)];

const PYTHON_PINS: &str = include_str!("../../../guest-sdk/python/requirements.txt");
const JS_PACKAGE: &str = include_str!("../../../guest-sdk/js/toolchain/package.json");
const JS_LOCK: &str = include_str!("../../../guest-sdk/js/toolchain/package-lock.json");
const JS_DRIVER: &str = include_str!("../../../guest-sdk/js/toolchain/componentize.mjs");
const JS_TYPEGEN: &str = include_str!("../../../guest-sdk/js/toolchain/gentypes.mjs");

/// A language whose plugins need a toolchain besides cargo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Tool {
    /// componentize-py (PyPI), in a venv.
    Python,
    /// componentize-js (npm), in a local node_modules.
    Js,
}

impl Tool {
    /// The cache folder's name.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Python => "componentize-py",
            Tool::Js => "componentize-js",
        }
    }

    /// The files that decide what is installed: part of the cache key and of a build's key.
    fn inputs(self) -> Vec<&'static str> {
        match self {
            Tool::Python => vec![PYTHON_PINS],
            Tool::Js => vec![JS_PACKAGE, JS_LOCK, JS_DRIVER, JS_TYPEGEN],
        }
    }

    fn interpreter(self) -> String {
        let (var, default) = match self {
            Tool::Python => ("WASMFORMER_PYTHON", "python3"),
            Tool::Js => ("WASMFORMER_NODE", "node"),
        };
        std::env::var(var).unwrap_or_else(|_| default.to_owned())
    }
}

/// An installed toolchain.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub tool: Tool,
    /// Its folder under the cache.
    pub dir: PathBuf,
    /// The hash of its inputs (also the folder's name).
    pub key: String,
}

impl Toolchain {
    /// The command that builds a plugin: `componentize-py`, or `node componentize.mjs`.
    pub fn command(&self) -> Command {
        match self.tool {
            Tool::Python => Command::new(self.dir.join("venv/bin/componentize-py")),
            Tool::Js => {
                let mut node = Command::new(self.tool.interpreter());
                node.arg(self.dir.join("componentize.mjs"));
                node
            }
        }
    }
}

/// `$WASMFORMER_CACHE_DIR`, else `$XDG_CACHE_HOME/wasmformer`, else `~/.cache/wasmformer`.
pub fn cache_root() -> anyhow::Result<PathBuf> {
    std::env::var_os("WASMFORMER_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("wasmformer")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/wasmformer")))
        .context("no cache directory: set WASMFORMER_CACHE_DIR or HOME")
}

/// Returns the toolchain for `tool`, installing it first if this machine has none for its key.
pub fn ensure(tool: Tool) -> anyhow::Result<Toolchain> {
    let version = interpreter_version(tool)?;
    let mut hasher = Sha256::new();
    hasher.update(format!("{}\n{version}\n", tool.name()));
    for input in tool.inputs() {
        hasher.update(input);
    }
    let key = hex::encode(hasher.finalize())[..16].to_owned();
    let root = cache_root()?.join(tool.name());
    let dir = root.join(&key);
    let toolchain = Toolchain {
        tool,
        dir: dir.clone(),
        key,
    };
    if dir.join(".ready").exists() {
        return Ok(toolchain);
    }
    std::fs::create_dir_all(&root).with_context(|| format!("create {}", root.display()))?;
    let lock = File::create(root.join(format!("{}.lock", toolchain.key)))
        .context("create the install lock")?;
    lock.lock().context("wait for the install lock")?;
    if dir.join(".ready").exists() {
        return Ok(toolchain); // another process installed it while we waited
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("remove the incomplete install {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    eprintln!(
        "installing {} for {version} into {} (once per machine)",
        tool.name(),
        dir.display()
    );
    let started = std::time::Instant::now();
    match tool {
        Tool::Python => install_python(&dir)?,
        Tool::Js => install_js(&dir)?,
    }
    std::fs::write(dir.join(".ready"), format!("{version}\n"))?;
    eprintln!(
        "installed {} in {:.1}s",
        tool.name(),
        started.elapsed().as_secs_f64()
    );
    prune(&root, &toolchain.key);
    Ok(toolchain)
}

/// Keeps the two newest installs of a tool (each is 70-400 MB) and removes older ones.
fn prune(root: &Path, current: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut installs: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().is_dir() && e.file_name() != current)
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    installs.sort();
    for (_, old) in installs.iter().rev().skip(1) {
        eprintln!("removing the older install {}", old.display());
        let _ = std::fs::remove_dir_all(old);
        let _ = std::fs::remove_file(old.with_extension("lock"));
    }
}

/// `Python 3.11.7` / `v20.20.2`; a missing interpreter is an error that says what to install.
fn interpreter_version(tool: Tool) -> anyhow::Result<String> {
    let program = tool.interpreter();
    let output = Command::new(&program).arg("--version").output();
    let hint = match tool {
        Tool::Python => {
            "Python plugins need Python 3.10 or newer with venv and pip (e.g. apt-get install python3-venv)"
        }
        Tool::Js => {
            "JavaScript plugins need Node.js 18 or newer with npm (e.g. apt-get install nodejs npm)"
        }
    };
    match output {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(if out.stdout.is_empty() {
                &out.stderr
            } else {
                &out.stdout
            })
            .trim()
            .to_owned();
            Ok(text)
        }
        Ok(out) => bail!("`{program} --version` failed ({}): {hint}", out.status),
        Err(e) => bail!("cannot run `{program}` ({e}): {hint}"),
    }
}

fn install_python(dir: &Path) -> anyhow::Result<()> {
    std::fs::write(dir.join("requirements.txt"), PYTHON_PINS)?;
    let venv = dir.join("venv");
    run(Command::new(Tool::Python.interpreter())
        .args(["-m", "venv"])
        .arg(&venv))?;
    run(Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "-q",
            "-r",
        ])
        .arg(dir.join("requirements.txt")))
}

fn install_js(dir: &Path) -> anyhow::Result<()> {
    std::fs::write(dir.join("package.json"), JS_PACKAGE)?;
    std::fs::write(dir.join("package-lock.json"), JS_LOCK)?;
    std::fs::write(dir.join("componentize.mjs"), JS_DRIVER)?;
    std::fs::write(dir.join("gentypes.mjs"), JS_TYPEGEN)?;
    let npm = std::env::var("WASMFORMER_NPM").unwrap_or_else(|_| "npm".to_owned());
    run(Command::new(npm).current_dir(dir).args([
        "ci",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
    ]))
}

/// Runs `command`, echoing it, with its output going to our stderr (stdout stays for results);
/// fails on a non-zero exit.
pub fn run(command: &mut Command) -> anyhow::Result<()> {
    eprintln!("  $ {}", shown(command));
    let status = command
        .stdout(std::io::stderr())
        .status()
        .with_context(|| format!("cannot run {}", shown(command)))?;
    if !status.success() {
        bail!("{} failed ({status})", shown(command));
    }
    Ok(())
}

fn shown(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `wasmformer toolchain`: installs (or finds) the toolchains and prints their folders.
#[derive(Debug, clap::Args)]
pub struct ToolchainArgs {
    /// The toolchains to prepare (default: both).
    #[arg(value_enum)]
    tools: Vec<Tool>,
}

pub fn run_command(args: ToolchainArgs) -> anyhow::Result<std::process::ExitCode> {
    let tools = if args.tools.is_empty() {
        vec![Tool::Python, Tool::Js]
    } else {
        args.tools
    };
    for tool in tools {
        let toolchain = ensure(tool)?;
        println!("{:<16} {}", tool.name(), toolchain.dir.display());
    }
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    /// A `.wit` file added to `wit/` but not staged breaks every Python and JavaScript build
    /// ("interface or world `state` does not exist").
    #[test]
    fn every_contract_file_is_staged_for_python_and_javascript_builds() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".wit"))
            .collect();
        files.sort();
        let staged: Vec<&str> = super::WIT.iter().map(|(name, _)| *name).collect();
        assert_eq!(files, staged);
    }
}
