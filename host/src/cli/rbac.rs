//! `wasmformer rbac`: prints the RBAC objects exactly a configuration needs.

use std::path::PathBuf;
use std::process::ExitCode;

use wasmformer::config::HostConfig;
use wasmformer::error_chain;
use wasmformer::rbac::{self, RbacOptions, Resource};
use wasmformer::runtime;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Reads: get/list/watch; writes: apply → patch+create, patch, create, delete (status: true adds <resource>/status); events: true → events.k8s.io events create+patch.\n\
What a config binds to namespaces becomes a Role per namespace, the rest one ClusterRole."
)]
pub struct RbacArgs {
    /// The host configuration (YAML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The namespace of the ServiceAccount the host runs as (for the bindings).
    #[arg(long, value_name = "NS", default_value = "default")]
    namespace: String,
    /// Also print bindings of the roles to this ServiceAccount.
    #[arg(long, value_name = "NAME")]
    service_account: Option<String>,
    /// The name of the roles and bindings.
    #[arg(long, default_value = "wasmformer")]
    name: String,
    /// Do not ask the cluster for resource names and scopes: guess plurals as kubectl does and
    /// treat every kind as namespaced except Namespace, Node, PersistentVolume and kinds named
    /// `Cluster*`.
    #[arg(long)]
    offline: bool,
}

pub fn run(args: RbacArgs) -> anyhow::Result<ExitCode> {
    let config = HostConfig::load(&args.config)?;
    let options = RbacOptions {
        name: args.name.clone(),
        service_account: args.service_account.clone(),
        namespace: args.namespace.clone(),
    };
    let objects = objects(&config, &options, args.offline)?;
    match objects {
        Ok(objects) => {
            print!("{}", rbac::to_yaml(&objects));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

/// The RBAC objects `config` needs: kinds resolved by the cluster's discovery, or guessed when
/// `offline`. The outer error: the cluster could not be reached; the inner: a kind is unknown.
pub(super) fn objects(
    config: &HostConfig,
    options: &RbacOptions,
    offline: bool,
) -> anyhow::Result<Result<Vec<serde_json::Value>, String>> {
    if offline {
        Ok(rbac::objects(config, options, |kind| {
            let name = kind
                .kind
                .clone()
                .or_else(|| kind.resource.clone())
                .unwrap_or_default();
            let plural = kind
                .resource
                .clone()
                .unwrap_or_else(|| rbac::guess_plural(&name));
            let cluster_scoped = ["Namespace", "Node", "PersistentVolume"].contains(&name.as_str())
                || name.starts_with("Cluster");
            Ok(Resource {
                group: kind.group_version().0.to_owned(),
                plural,
                namespaced: !cluster_scoped,
            })
        }))
    } else {
        let tokio = tokio::runtime::Runtime::new()?;
        tokio.block_on(async {
            let client = runtime::connect(config).await?;
            let discovery = runtime::Discovery::new(client);
            let mut resolved = Vec::new();
            for plugin in &config.plugins {
                for (_, kind) in plugin.kinds() {
                    let found = discovery
                        .resolve(plugin.name.as_str(), &kind)
                        .await
                        .map_err(|e| error_chain(&e));
                    resolved.push((
                        kind,
                        found.map(|(r, namespaced)| Resource {
                            group: r.group,
                            plural: r.plural,
                            namespaced,
                        }),
                    ));
                }
            }
            anyhow::Ok(rbac::objects(config, options, |kind| {
                resolved
                    .iter()
                    .find(|(k, _)| k == kind)
                    .map(|(_, r)| r.clone())
                    .unwrap_or_else(|| Err(format!("{kind} was not resolved")))
            }))
        })
    }
}
