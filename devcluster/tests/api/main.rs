//! Integration tests against the dev cluster with real clients: kube-rs (CRUD, lists,
//! watchers, faults), kubectl as a subprocess, and a load test.

mod common;
mod control;
mod kube_crud;
mod kube_watcher;
mod kubectl;
mod load;
