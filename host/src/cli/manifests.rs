//! `wasmformer manifests`: prints (or writes to a kustomize folder) the objects that run a
//! configuration in a cluster; the RBAC part is `wasmformer rbac`'s, bound to the ServiceAccount.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use wasmformer::config::HostConfig;
use wasmformer::manifests::{self, ManifestOptions};
use wasmformer::rbac::{self, RbacOptions};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Prints one YAML stream for `kubectl apply -f -`; with --out, one file per object and a kustomization.yaml.\n\
The RBAC part is `wasmformer rbac --service-account NAME --namespace NS --name NAME`'s output."
)]
pub struct ManifestsArgs {
    /// The host configuration (YAML); it goes into the ConfigMap as it is.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The namespace the host runs in.
    #[arg(long, value_name = "NS", default_value = "default")]
    namespace: String,
    /// The container image.
    #[arg(long, value_name = "IMG", default_value = concat!("wasmformer:", env!("CARGO_PKG_VERSION")))]
    image: String,
    /// Deployment replicas.
    #[arg(long, value_name = "N", default_value_t = 1)]
    replicas: u32,
    /// Also generate a Prometheus Operator ServiceMonitor (`monitoring.coreos.com/v1`).
    #[arg(long)]
    service_monitor: bool,
    /// The name of every object.
    #[arg(long, default_value = "wasmformer")]
    name: String,
    /// Write one file per object and a kustomization.yaml into DIR instead of printing.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Do not ask the cluster for resource names and scopes (as `wasmformer rbac --offline`).
    #[arg(long)]
    offline: bool,
}

pub fn run(args: ManifestsArgs) -> anyhow::Result<ExitCode> {
    let config = HostConfig::load(&args.config)?;
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("cannot read {}", args.config.display()))?;
    let rbac_options = RbacOptions {
        name: args.name.clone(),
        service_account: Some(args.name.clone()),
        namespace: args.namespace.clone(),
    };
    let rbac = match super::rbac::objects(&config, &rbac_options, args.offline)? {
        Ok(objects) => objects,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let options = ManifestOptions {
        name: args.name,
        namespace: args.namespace,
        image: args.image,
        replicas: args.replicas,
        service_monitor: args.service_monitor,
    };
    let set = match manifests::manifests(&config, &text, rbac, &options) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    for warning in manifests::warnings(&config, &options) {
        eprintln!("warning: {warning}");
    }
    match args.out {
        None => {
            let objects: Vec<_> = set.into_iter().flat_map(|m| m.objects).collect();
            print!("{}", rbac::to_yaml(&objects));
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let kustomization = manifests::kustomization(&set);
            for manifest in &set {
                write(&dir.join(manifest.file), &rbac::to_yaml(&manifest.objects))?;
            }
            write(
                &dir.join("kustomization.yaml"),
                &rbac::to_yaml(&[kustomization]),
            )?;
            eprintln!(
                "wrote {} files and kustomization.yaml to {}",
                set.len(),
                dir.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
