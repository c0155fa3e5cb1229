//! [`DevCluster`]: starts the in-process API server on a loopback port and hands out what
//! clients and tests need (URL, kubeconfig, `kube::Client`, store, faults, request log).

use std::{
    io,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

use axum::Router;
use axum::serve::ListenerExt;
use tokio::{sync::oneshot, task::JoinHandle};

use crate::{
    controllers::{self, ControllerConfig, Controllers},
    faults::Faults,
    handlers::{self, App},
    kubeconfig,
    request_log::RequestLog,
    store::Store,
};

/// How the dev cluster is started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevClusterConfig {
    /// Listen address; the default `127.0.0.1:0` picks a free loopback port.
    pub addr: SocketAddr,
    /// Events kept for watches and consistent pagination; older positions get 410 Gone.
    pub history_limit: usize,
    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK while idle.
    pub bookmark_interval: Duration,
    /// Requests kept in the request log.
    pub request_log_limit: usize,
    /// The KWOK-style controllers (fake Nodes, Deployments, ReplicaSets, scheduler, kubelet,
    /// Jobs, garbage collector); `None` (the library default, so tests see only their own
    /// writes) runs none. `wasmformer dev` turns them on unless `--no-controllers`.
    pub controllers: Option<ControllerConfig>,
}

impl Default for DevClusterConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(10),
            request_log_limit: 100_000,
            controllers: None,
        }
    }
}

impl DevClusterConfig {
    /// Sets [`DevClusterConfig::addr`].
    #[must_use]
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Sets [`DevClusterConfig::history_limit`].
    #[must_use]
    pub fn history_limit(mut self, limit: usize) -> Self {
        self.history_limit = limit;
        self
    }

    /// Sets [`DevClusterConfig::bookmark_interval`].
    #[must_use]
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Sets [`DevClusterConfig::controllers`].
    #[must_use]
    pub fn controllers(mut self, controllers: Option<ControllerConfig>) -> Self {
        self.controllers = controllers;
        self
    }

    /// Sets [`DevClusterConfig::request_log_limit`].
    #[must_use]
    pub fn request_log_limit(mut self, limit: usize) -> Self {
        self.request_log_limit = limit;
        self
    }
}

/// Starting, using or stopping the dev cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("binding the dev cluster to {addr}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// The kubeconfig file could not be written.
    #[error("writing the dev cluster kubeconfig to {}", path.display())]
    WriteKubeconfig {
        /// The target path.
        path: PathBuf,
        /// The file system error.
        #[source]
        source: io::Error,
    },
    /// A `kube::Client` could not be built.
    #[error("building a kube client for the dev cluster")]
    Client(#[source] kube::Error),
    /// The HTTP server stopped with an error.
    #[error("the dev cluster server failed")]
    Serve(#[source] io::Error),
}

/// `pub type Result<T, E = Error>` for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A running in-memory API server.
#[derive(Debug)]
pub struct DevCluster {
    addr: SocketAddr,
    url: String,
    store: Store,
    faults: Faults,
    log: RequestLog,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<io::Result<()>>>,
    controllers: Option<Controllers>,
}

impl DevCluster {
    /// Binds the listener and starts serving.
    pub async fn start(config: DevClusterConfig) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| Error::Bind {
                addr: config.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.addr,
            source,
        })?;
        let store = Store::new(config.history_limit);
        let faults = Faults::new(store.clone());
        let log = RequestLog::new(config.request_log_limit);
        let app = App {
            store: store.clone(),
            faults: faults.clone(),
            log: log.clone(),
            bookmark_interval: config.bookmark_interval,
            server_address: addr.to_string(),
        };
        let controllers = config
            .controllers
            .clone()
            .map(|c| controllers::spawn(store.clone(), c));
        let router = Router::new().fallback(handlers::handle).with_state(app);
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            // Watch events are small writes: without TCP_NODELAY, Nagle's algorithm holds each
            // one back until the client's (delayed, ~40 ms) ACK of the previous one. Go's
            // net/http, behind the real API server, sets it too.
            let listener = listener.tap_io(|tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::warn!(error = %e, "cannot set TCP_NODELAY");
                }
            });
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        tracing::info!(dev.addr = %addr, "dev cluster listening");
        Ok(Self {
            addr,
            url: format!("http://{addr}"),
            store,
            faults,
            log,
            stop: Some(stop),
            server: Some(server),
            controllers,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The object store, for seeding objects and for the simulator.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The fault-injection controls.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Every request the server received.
    pub fn request_log(&self) -> &RequestLog {
        &self.log
    }

    /// A kubeconfig document for this cluster (context `wasmformer-dev`).
    pub fn kubeconfig(&self) -> String {
        kubeconfig::render(&self.url, "default")
    }

    /// Writes [`DevCluster::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        kubeconfig::write(path, &self.url).map_err(|source| Error::WriteKubeconfig {
            path: path.to_path_buf(),
            source,
        })
    }

    /// A `kube::Config` for this cluster (namespace `default`).
    pub fn kube_config(&self) -> kube::Config {
        kubeconfig::kube_config(&self.url)
    }

    /// A `kube::Client` for this cluster. Must be called inside a Tokio runtime.
    pub fn client(&self) -> Result<kube::Client> {
        kube::Client::try_from(self.kube_config()).map_err(Error::Client)
    }

    /// Closes open watches, releases paused requests and stops the server, waiting up to five
    /// seconds for in-flight requests.
    pub async fn shutdown(mut self) -> Result<()> {
        if let Some(controllers) = self.controllers.take() {
            controllers.stop().await;
        }
        self.signal_stop();
        let Some(mut server) = self.server.take() else {
            return Ok(());
        };
        match tokio::time::timeout(Duration::from_secs(5), &mut server).await {
            Ok(Ok(result)) => result.map_err(Error::Serve),
            Ok(Err(join)) if join.is_cancelled() => Ok(()),
            Ok(Err(join)) => Err(Error::Serve(io::Error::other(join))),
            Err(_elapsed) => {
                server.abort();
                Ok(())
            }
        }
    }

    fn signal_stop(&mut self) {
        self.faults.stop();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        self.signal_stop();
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}
