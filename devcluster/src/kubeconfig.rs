//! Client configuration for the dev cluster: a kubeconfig file for kubectl and client-go
//! (plain http, no credentials, context `wasmformer-dev`) and the equivalent `kube::Config`.

use std::{io, path::Path};

/// The cluster, user and context name written to kubeconfigs.
pub const CONTEXT_NAME: &str = "wasmformer-dev";

/// A kubeconfig document pointing at `url`, with `namespace` as the context's default.
pub fn render(url: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT_NAME}
  cluster:
    server: {url}
users:
- name: {CONTEXT_NAME}
  user: {{}}
contexts:
- name: {CONTEXT_NAME}
  context:
    cluster: {CONTEXT_NAME}
    user: {CONTEXT_NAME}
    namespace: {namespace}
current-context: {CONTEXT_NAME}
preferences: {{}}
"
    )
}

/// Writes [`render`] to `path`, creating parent directories.
pub fn write(path: &Path, url: &str) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, render(url, "default"))
}

/// A `kube::Config` for `url` with the `default` namespace and no read timeout (watches are
/// long-lived).
pub fn kube_config(url: &str) -> kube::Config {
    let mut config = kube::Config::new(url.parse().expect("the dev cluster url is a valid URI"));
    config.read_timeout = None;
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_parses_with_kube_and_selects_the_dev_context() {
        let text = render("http://127.0.0.1:1234", "default");
        let parsed = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(parsed.current_context.as_deref(), Some(CONTEXT_NAME));
        let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("http://127.0.0.1:1234"));
        assert_eq!(
            parsed.contexts[0]
                .context
                .as_ref()
                .unwrap()
                .namespace
                .as_deref(),
            Some("default")
        );
    }

    #[test]
    fn kube_config_targets_the_url() {
        let config = kube_config("http://127.0.0.1:1234");
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:1234/");
        assert_eq!(config.default_namespace, "default");
    }
}
