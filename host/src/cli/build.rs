//! `wasmformer build [DIR]`: builds a plugin folder into a component with its language's
//! toolchain, saying what it runs. Rust: `cargo build --release --target wasm32-wasip2`. Python
//! and JavaScript: the SDK and the WIT are staged beside the plugin's sources and handed to
//! componentize-py / componentize-js (installed on first use, see [`super::toolchain`]), in the
//! world [`COMPONENTIZED_WORLD`]. A Python or JavaScript build is cached by the hash of its
//! sources, the SDK, the WIT and the toolchain's pins: building unchanged sources again copies the
//! cached component.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

use super::toolchain::{self, JS_SDK, PYTHON_SDK, Tool, WIT};

/// The world Python and JavaScript plugins are built in: `plugin` with the `state` export, which
/// their SDKs leave empty unless the plugin opts in (`export(MyPlugin, state=True)`,
/// `exportPlugin(MyPlugin, { state: true })`), so no build needs to know whether it does.
pub const COMPONENTIZED_WORLD: &str = "stateful-plugin";

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The language is told by the folder: Cargo.toml (Rust), package.json (JavaScript), \
pyproject.toml or app.py (Python).\nPython and JavaScript components are written to DIR/build/NAME.wasm."
)]
pub struct BuildArgs {
    /// The plugin's folder.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Also copy the component here.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Then run `wasmformer replay` with the folder's events.yaml.
    #[arg(long)]
    replay: bool,
}

/// A plugin's language, told by the files in its folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

impl Lang {
    pub fn detect(dir: &Path) -> anyhow::Result<Self> {
        if dir.join("Cargo.toml").is_file() {
            Ok(Lang::Rust)
        } else if dir.join("package.json").is_file() {
            Ok(Lang::Js)
        } else if dir.join("pyproject.toml").is_file() || dir.join("app.py").is_file() {
            Ok(Lang::Python)
        } else {
            bail!(
                "{} is not a plugin folder: it has no Cargo.toml, package.json, pyproject.toml or app.py",
                dir.display()
            )
        }
    }
}

pub fn run(args: BuildArgs) -> anyhow::Result<ExitCode> {
    let dir = args
        .dir
        .canonicalize()
        .with_context(|| format!("no plugin folder {}", args.dir.display()))?;
    let wasm = build(&dir)?;
    if let Some(out) = &args.out {
        std::fs::copy(&wasm, out)
            .with_context(|| format!("copy the component to {}", out.display()))?;
    }
    println!("{}", args.out.as_ref().unwrap_or(&wasm).display());
    if args.replay {
        let events = dir.join("events.yaml");
        let exe = std::env::current_exe().context("find the wasmformer executable")?;
        eprintln!("replaying {}", events.display());
        // An interpreter's first call (init) can take over the default 100 ms on a busy machine.
        let deadline = if Lang::detect(&dir)? == Lang::Rust {
            "100ms"
        } else {
            "2s"
        };
        let status = Command::new(exe)
            .arg("replay")
            .arg("--plugin")
            .arg(&wasm)
            .arg("--events")
            .arg(&events)
            .args(["--deadline", deadline])
            .status()?;
        return Ok(ExitCode::from(status.code().unwrap_or(2) as u8));
    }
    Ok(ExitCode::SUCCESS)
}

/// Builds the plugin in `dir` (canonical) and returns the component's path.
pub fn build(dir: &Path) -> anyhow::Result<PathBuf> {
    match Lang::detect(dir)? {
        Lang::Rust => build_rust(dir),
        Lang::Python => build_componentized(dir, Tool::Python),
        Lang::Js => build_componentized(dir, Tool::Js),
    }
}

fn build_rust(dir: &Path) -> anyhow::Result<PathBuf> {
    let metadata = Command::new("cargo")
        .current_dir(dir)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("run cargo metadata")?;
    if !metadata.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&metadata.stderr).trim()
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&metadata.stdout).context("read cargo metadata")?;
    let manifest = dir.join("Cargo.toml");
    let package = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["manifest_path"].as_str().map(Path::new) == Some(manifest.as_path()))
        .context("cargo metadata does not list this folder's package")?;
    let name = package["name"]
        .as_str()
        .context("package without a name")?
        .to_owned();
    let target_dir = PathBuf::from(
        metadata["target_directory"]
            .as_str()
            .context("no target directory")?,
    );
    toolchain::run(Command::new("cargo").current_dir(dir).args([
        "build",
        "--release",
        "--target",
        "wasm32-wasip2",
        "-p",
        &name,
    ]))?;
    let wasm = target_dir
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    if !wasm.is_file() {
        bail!(
            "cargo built no {}: is the crate a cdylib (`[lib] crate-type = [\"cdylib\"]`)?",
            wasm.display()
        );
    }
    Ok(wasm)
}

/// The plugin's name: `name` in pyproject.toml or package.json, else the folder's name.
fn plugin_name(dir: &Path, tool: Tool) -> String {
    let declared = match tool {
        Tool::Js => std::fs::read_to_string(dir.join("package.json"))
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|v| v["name"].as_str().map(str::to_owned)),
        Tool::Python => std::fs::read_to_string(dir.join("pyproject.toml"))
            .ok()
            .and_then(|text| {
                text.lines().find_map(|line| {
                    let (key, value) = line.split_once('=')?;
                    (key.trim() == "name").then(|| value.trim().trim_matches('"').to_owned())
                })
            }),
    };
    declared.filter(|n| !n.is_empty()).unwrap_or_else(|| {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".into())
    })
}

/// The entry module of a JavaScript plugin: `main` in package.json, else `plugin.js`.
fn js_main(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| {
            v["main"]
                .as_str()
                .map(|m| m.trim_start_matches("./").to_owned())
        })
        .unwrap_or_else(|| "plugin.js".into())
}

/// The plugin's source files (relative paths, sorted): what a build reads from its folder.
fn sources(dir: &Path, tool: Tool) -> anyhow::Result<Vec<PathBuf>> {
    let extensions: &[&str] = match tool {
        Tool::Python => &["py", "toml"],
        Tool::Js => &["js", "mjs", "json"],
    };
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        for entry in std::fs::read_dir(dir.join(&rel))
            .with_context(|| format!("read {}", dir.join(&rel).display()))?
        {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.')
                || ["build", "node_modules", "__pycache__", "target"].contains(&name.as_str())
            {
                continue;
            }
            let path = rel.join(&name);
            if entry.file_type()?.is_dir() {
                pending.push(path);
            } else if path
                .extension()
                .is_some_and(|e| extensions.contains(&&*e.to_string_lossy()))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

fn build_componentized(dir: &Path, tool: Tool) -> anyhow::Result<PathBuf> {
    let name = plugin_name(dir, tool);
    let toolchain = toolchain::ensure(tool)?;
    let sources = sources(dir, tool)?;
    let sdk = match tool {
        Tool::Python => PYTHON_SDK,
        Tool::Js => JS_SDK,
    };

    // The build's identity: toolchain, SDK, WIT and sources (paths and contents).
    let mut hasher = Sha256::new();
    hasher.update(format!("{}\n", toolchain.key));
    for (path, text) in sdk.iter().chain(WIT) {
        hasher.update(format!("{path}\n{}\n", text.len()));
        hasher.update(text);
    }
    for rel in &sources {
        let bytes = std::fs::read(dir.join(rel))?;
        hasher.update(format!("{}\n{}\n", rel.display(), bytes.len()));
        hasher.update(&bytes);
    }
    let key = hex::encode(hasher.finalize());
    let cached = toolchain::cache_root()?
        .join("builds")
        .join(format!("{}.wasm", &key[..32]));
    let out_dir = dir.join("build");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("create {}", out_dir.display()))?;
    let wasm = out_dir.join(format!("{name}.wasm"));
    // A cached build may go between a check and the copy (another build pruning the cache), so
    // the copy is the check.
    match std::fs::copy(&cached, &wasm) {
        Ok(_) => {
            eprintln!(
                "{name}: sources unchanged since a previous build, reusing {}",
                cached.display()
            );
            // Used now: the last to go when the cache is pruned.
            let _ = std::fs::File::options()
                .write(true)
                .open(&cached)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            return Ok(wasm);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("copy {}", cached.display())),
    }

    let stage = out_dir.join(".stage");
    if stage.exists() {
        std::fs::remove_dir_all(&stage)?;
    }
    let sdk_dir = if tool == Tool::Js {
        stage.join("src")
    } else {
        stage.clone()
    };
    for (path, text) in sdk {
        write(&sdk_dir.join(path), text)?;
    }
    for (path, text) in WIT {
        write(&stage.join("wit").join(path), text)?;
    }
    let started = std::time::Instant::now();
    eprintln!(
        "building {name} ({}) with {}",
        if tool == Tool::Python {
            "Python"
        } else {
            "JavaScript"
        },
        tool.name()
    );
    let built = stage.join("plugin.wasm");
    let mut command = toolchain.command();
    match tool {
        Tool::Python => {
            let app = if dir.join("app.py").is_file() {
                "app"
            } else {
                bail!("{}: a Python plugin's module is app.py", dir.display())
            };
            write(
                &stage.join("wasmformer_main.py"),
                &format!(
                    "# Generated by wasmformer build: the plugin module, then the SDK's exports.\nimport {app}  # noqa: F401\nfrom wasmformer import Handler, State  # noqa: F401\n"
                ),
            )?;
            command
                .arg("-d")
                .arg(stage.join("wit"))
                .args(["-w", COMPONENTIZED_WORLD, "componentize", "-p"])
                .arg(&stage)
                .arg("-p")
                .arg(dir)
                .arg("wasmformer_main")
                .arg("-o")
                .arg(&built);
        }
        Tool::Js => {
            // componentize-js resolves relative imports only: the sources are staged beside the
            // SDK, with `from "wasmformer"` pointing at it.
            for rel in &sources {
                let text = std::fs::read_to_string(dir.join(rel))?;
                let depth = rel.components().count() - 1;
                let sdk_path = if depth == 0 {
                    "./wasmformer.js".to_owned()
                } else {
                    format!("{}wasmformer.js", "../".repeat(depth))
                };
                let text = text
                    .replace("from \"wasmformer\"", &format!("from \"{sdk_path}\""))
                    .replace("from 'wasmformer'", &format!("from '{sdk_path}'"));
                write(&stage.join("src").join(rel), &text)?;
            }
            let main = js_main(dir);
            if !dir.join(&main).is_file() {
                bail!(
                    "{}: no {main} (the plugin's entry module, `main` in package.json)",
                    dir.display()
                );
            }
            // The entry: the plugin's module (which calls exportPlugin), then the SDK's exports.
            write(
                &stage.join("src/wasmformer_main.js"),
                &format!(
                    "import \"./{main}\";\nexport {{ handler, state }} from \"./wasmformer.js\";\n"
                ),
            )?;
            command
                .arg(stage.join("src/wasmformer_main.js"))
                .arg(stage.join("wit"))
                .arg(&built)
                .arg(COMPONENTIZED_WORLD);
        }
    }
    toolchain::run(&mut command)?;
    std::fs::copy(&built, &wasm)?;
    if let Some(parent) = cached.parent() {
        std::fs::create_dir_all(parent)?;
        let tmp = parent.join(format!(".{}.{}.tmp", &key[..32], std::process::id()));
        std::fs::copy(&built, &tmp)?;
        std::fs::rename(&tmp, &cached)?;
        prune_builds(parent, BUILD_CACHE_BYTES);
    }
    std::fs::remove_dir_all(&stage)?;
    eprintln!("built {name} in {:.1}s", started.elapsed().as_secs_f64());
    Ok(wasm)
}

/// How much the cache of Python and JavaScript builds keeps: a build is 10-20 MB, one for each
/// change of a plugin's sources, so an author's edits would fill a disk over time.
const BUILD_CACHE_BYTES: u64 = 1 << 30;

/// Removes the least recently used builds (by modification time, which a reuse renews) until
/// the rest hold at most `max_bytes`. The newest is always kept.
fn prune_builds(dir: &Path, max_bytes: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut builds: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    builds.sort_by_key(|b| std::cmp::Reverse(b.0));
    let mut kept = 0;
    for (i, (_, len, path)) in builds.into_iter().enumerate() {
        kept += len;
        if i > 0 && kept > max_bytes {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn the_build_cache_keeps_the_most_recently_used_builds_within_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let build = |name: &str, hours_ago: u64| {
            let path = dir.path().join(name);
            std::fs::write(&path, [0u8; 10]).unwrap();
            let used = SystemTime::now() - Duration::from_secs(3600 * hours_ago);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(used)
                .unwrap();
            path
        };
        let oldest = build("a.wasm", 3);
        let older = build("b.wasm", 2);
        let newest = build("c.wasm", 1);
        let other = build("notes.txt", 9);

        prune_builds(dir.path(), 20);
        assert!(!oldest.exists() && older.exists() && newest.exists() && other.exists());
        // Over the size with one alone: the newest stays.
        prune_builds(dir.path(), 5);
        assert!(!older.exists() && newest.exists());
    }
}
