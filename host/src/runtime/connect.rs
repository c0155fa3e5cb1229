//! Connecting to the cluster the configuration names.

use kube::Client;

use crate::config::HostConfig;

/// Why the host could not connect to the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig could not be read or used.
    #[error("cannot use kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No configuration could be inferred (no kubeconfig, not in a cluster).
    #[error(
        "cannot find cluster credentials: set cluster.kubeconfig, $KUBECONFIG or cluster.inCluster"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The in-cluster service account is not usable.
    #[error("cannot use the in-cluster service account")]
    InCluster(#[source] kube::config::InClusterError),
    /// The client could not be built.
    #[error("cannot create the API client")]
    Client(#[source] kube::Error),
}

/// A client for the cluster the configuration names.
pub async fn connect(config: &HostConfig) -> Result<Client, ConnectError> {
    let cluster = &config.cluster;
    let kube_config = if cluster.in_cluster {
        kube::Config::incluster().map_err(ConnectError::InCluster)?
    } else if let Some(path) = &cluster.kubeconfig {
        let path = config.base_dir.join(path);
        let options = kube::config::KubeConfigOptions {
            context: cluster.context.clone(),
            ..Default::default()
        };
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).map_err(|source| {
            ConnectError::Kubeconfig {
                path: path.clone(),
                source,
            }
        })?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|source| ConnectError::Kubeconfig { path, source })?
    } else if cluster.context.is_some() {
        let options = kube::config::KubeConfigOptions {
            context: cluster.context.clone(),
            ..Default::default()
        };
        kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|source| ConnectError::Kubeconfig {
                path: "$KUBECONFIG".into(),
                source,
            })?
    } else {
        kube::Config::infer().await.map_err(ConnectError::Infer)?
    };
    Client::try_from(kube_config).map_err(ConnectError::Client)
}
