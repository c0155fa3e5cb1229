//! `wasmformer new --lang rust|python|js NAME`: a plugin folder that builds and replays as
//! generated: the handler source, its manifest (Cargo.toml, pyproject.toml or package.json), an
//! `events.yaml` and a short README. The templates are in `templates/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The plugin's language.
    #[arg(long, value_enum)]
    lang: NewLang,
    /// The plugin's name (lowercase letters, digits and '-'); the folder is created with it.
    name: String,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum NewLang {
    Rust,
    Python,
    Js,
}

const EVENTS: &str = include_str!("templates/events.yaml");
const README: &str = include_str!("templates/README.md");

/// Where the Rust SDK is: `$WASMFORMER_GUEST_SDK`, else the `guest-sdk/` this binary was built from.
fn rust_sdk() -> anyhow::Result<PathBuf> {
    let sdk = std::env::var_os("WASMFORMER_GUEST_SDK")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk"));
    sdk.join("Cargo.toml").is_file().then(|| sdk.canonicalize()).transpose()?.with_context(|| {
        format!("the Rust SDK is not at {} (it is not on crates.io): set WASMFORMER_GUEST_SDK to wasmformer's guest-sdk folder", sdk.display())
    })
}

pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    let name = &args.name;
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        || name.starts_with('-')
    {
        bail!("plugin name {name:?}: use lowercase letters, digits and '-'");
    }
    let dir = PathBuf::from(name);
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let class: String = name
        .split('-')
        .map(|part| part[..part.len().min(1)].to_uppercase() + &part[part.len().min(1)..])
        .collect();
    let class = if class.starts_with(|c: char| c.is_ascii_digit()) {
        format!("Plugin{class}")
    } else {
        class
    };
    let (lang, source, files): (&str, &str, Vec<(&str, String)>) = match args.lang {
        NewLang::Rust => {
            let sdk = rust_sdk()?;
            let toml =
                include_str!("templates/Cargo.toml").replace("{{sdk}}", &sdk.display().to_string());
            (
                "Rust",
                "src/lib.rs",
                vec![
                    ("Cargo.toml", toml),
                    (
                        ".cargo/config.toml",
                        // The workspace's own, so plugins built here and new ones match.
                        include_str!("../../../.cargo/config.toml").into(),
                    ),
                    ("src/lib.rs", include_str!("templates/lib.rs").into()),
                ],
            )
        }
        NewLang::Python => (
            "Python",
            "app.py",
            vec![
                (
                    "pyproject.toml",
                    include_str!("templates/pyproject.toml").into(),
                ),
                ("app.py", include_str!("templates/app.py").into()),
            ],
        ),
        NewLang::Js => (
            "JavaScript",
            "plugin.js",
            vec![
                (
                    "package.json",
                    include_str!("templates/package.json").into(),
                ),
                ("plugin.js", include_str!("templates/plugin.js").into()),
            ],
        ),
    };
    let readme = README
        .replace("{{lang}}", lang)
        .replace("{{source}}", source);
    let files = files
        .into_iter()
        .chain([("events.yaml", EVENTS.to_owned()), ("README.md", readme)]);
    let mut written = Vec::new();
    for (path, text) in files {
        let target = dir.join(path);
        std::fs::create_dir_all(target.parent().expect("a file in the plugin folder"))?;
        std::fs::write(
            &target,
            text.replace("{{name}}", name).replace("{{class}}", &class),
        )
        .with_context(|| format!("write {}", target.display()))?;
        written.push(path);
    }
    println!(
        "created the {lang} plugin {name} in {}/: {}",
        dir.display(),
        written.join(", ")
    );
    println!(
        "build and replay it: wasmformer build {} --replay",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
