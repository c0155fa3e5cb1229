//! The end-to-end suite, as one test binary: each module is one of the files beside this one.
//!
//! One binary, not one per file: each links wasmtime, kube and the dev cluster, and twenty-odd
//! of them took gigabytes of a CI disk and minutes of linking. Its tests share one real
//! kube-apiserver ([`wasmformer_tests::apiserver::KubeApiserver::shared`]), each in namespaces
//! of its own. Run one file's tests with `cargo test -p wasmformer-tests --test integration
//! <module>::`.

mod devcluster_clientgo;
mod devcluster_openapi;
mod devcluster_writer;
mod e2e_apiserver;
mod e2e_rbac;
mod e2e_writer;
mod event_sequences;
mod host_devcluster;
mod hot_swap;
mod hot_swap_writes;
mod kubectl_session;
mod metrics;
mod plugin_lifecycle;
mod plugin_state;
mod protobuf_json;
mod readme;
mod reconcile_apiserver;
mod reconcile_contract;
mod sandbox;
mod status_page;
mod writer;
mod writer_host;
