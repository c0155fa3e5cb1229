//! WATCH requests: a chunked stream of JSON lines (`{"type":"ADDED","object":{...}}`).
//!
//! A watch either starts with synthetic ADDED events for the current state (no resourceVersion,
//! `"0"`, or `sendInitialEvents=true`, which ends the initial events with a BOOKMARK annotated
//! `k8s.io/initial-events-end`) or replays the history after the given resourceVersion. It then
//! follows the history from its cursor. Selectors are applied per event using the previous
//! state, so an object that stops matching is sent as DELETED and one that starts matching as
//! ADDED. A cursor the history no longer reaches ends the stream with an ERROR event carrying a
//! 410 Expired Status, like the real server.

use std::{collections::VecDeque, convert::Infallible, sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::header,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::{sync::watch, time::Instant};

use crate::{
    faults::Faults,
    list::{self, ListOptions, Selection},
    request_log::RequestRecord,
    resources::ResourceType,
    status::ApiStatus,
    store::{EventKind, PageRequest, Store, StoredEvent},
    view::View,
};

/// Watches without `timeoutSeconds` end after this long, as with the API server's default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Events read from the history per lock acquisition.
const BATCH: usize = 512;
/// Initial events serialized per chunk.
const INITIAL_CHUNK: usize = 256;

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// Initial ADDED events for the current state; `end_marker` adds the initial-events-end
    /// bookmark (streaming lists).
    Snapshot { end_marker: bool },
    /// Events after this resourceVersion.
    After(u64),
    /// Only changes from now on.
    Now,
}

fn start_of(options: &ListOptions) -> Start {
    match (options.send_initial_events, options.resource_version) {
        (Some(true), _) => Start::Snapshot { end_marker: true },
        (Some(false), None | Some(0)) => Start::Now,
        (None, None | Some(0)) => Start::Snapshot { end_marker: false },
        (_, Some(rv)) => Start::After(rv),
    }
}

/// Everything a watch stream needs.
pub(crate) struct WatchSetup {
    pub store: Store,
    pub ty: Arc<ResourceType>,
    pub version: String,
    pub options: ListOptions,
    pub view: View,
    pub bookmark_interval: Duration,
    pub faults: Faults,
    /// The request, for the faults that match watch streams.
    pub record: RequestRecord,
}

#[derive(Serialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a Value,
}

struct WatchStream {
    setup: WatchSetup,
    closer: watch::Receiver<u64>,
    /// Changes when a raw line is queued (fault injection).
    lines_added: watch::Receiver<u64>,
    api_version: String,
    latest: watch::Receiver<u64>,
    cursor: u64,
    initial: VecDeque<Arc<Value>>,
    end_marker: bool,
    deadline: Instant,
    next_bookmark: Instant,
    done: bool,
}

/// Serves a WATCH: validates the start position, then streams.
pub(crate) async fn serve(setup: WatchSetup) -> Result<Response, ApiStatus> {
    let start = start_of(&setup.options);
    let store = setup.store.clone();
    let selection = setup.options.selection.clone();
    if let (Start::Snapshot { end_marker: true }, Some(rv @ 1..)) =
        (start, setup.options.resource_version)
    {
        list::wait_for_version(&store, rv).await?;
    }
    let mut latest = store.subscribe();
    latest.borrow_and_update();
    let (initial, cursor) = match start {
        Start::Snapshot { .. } => {
            let request = PageRequest {
                resource: setup.ty.storage(),
                namespace: selection.namespace.as_deref(),
                at: None,
                after: None,
                limit: None,
            };
            let page = store
                .page(request, &|o| selection.matches(o))
                .map_err(ApiStatus::from)?;
            (page.items.into(), page.resource_version)
        }
        Start::After(rv) => (VecDeque::new(), rv),
        Start::Now => (VecDeque::new(), store.resource_version()),
    };
    let now = Instant::now();
    let stream = WatchStream {
        api_version: setup.ty.api_version(&setup.version),
        deadline: now + setup.options.timeout.unwrap_or(DEFAULT_TIMEOUT),
        next_bookmark: now + setup.bookmark_interval,
        end_marker: start == Start::Snapshot { end_marker: true },
        closer: setup.faults.watch_closer(),
        lines_added: setup.faults.watch_lines_added(),
        setup,
        latest,
        cursor,
        initial,
        done: false,
    };
    let body = futures::stream::unfold(stream, |mut stream| async move {
        let chunk = stream.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), stream))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache, private"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

impl WatchStream {
    fn write(out: &mut Vec<u8>, kind: &str, object: &Value) {
        serde_json::to_writer(&mut *out, &Line { kind, object }).expect("JSON values serialize");
        out.push(b'\n');
    }

    fn write_object(&self, out: &mut Vec<u8>, kind: EventKind, object: &Arc<Value>) {
        let object = self
            .setup
            .view
            .object(&self.setup.ty, &self.api_version, object);
        Self::write(out, kind.as_str(), &object);
    }

    fn bookmark(&self, initial_end: bool) -> Bytes {
        let mut metadata =
            json!({"resourceVersion": self.cursor.to_string(), "creationTimestamp": null});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let (api_version, kind) = self
            .setup
            .view
            .bookmark_type(&self.setup.ty, &self.api_version);
        let object = json!({"kind": kind, "apiVersion": api_version, "metadata": metadata});
        let mut out = Vec::new();
        Self::write(&mut out, "BOOKMARK", &object);
        out.into()
    }

    /// The event this watcher sees for a stored change, after selectors.
    fn translate(selection: &Selection, event: &StoredEvent) -> Option<(EventKind, Arc<Value>)> {
        let now = selection.matches(&event.object);
        let before = event
            .previous
            .as_deref()
            .is_some_and(|p| selection.matches(p));
        match (event.kind, before, now) {
            (EventKind::Added, _, true) => Some((EventKind::Added, event.object.clone())),
            (EventKind::Deleted, _, _) if now || before => {
                Some((EventKind::Deleted, event.object.clone()))
            }
            (EventKind::Modified, true, true) => Some((EventKind::Modified, event.object.clone())),
            (EventKind::Modified, false, true) => Some((EventKind::Added, event.object.clone())),
            (EventKind::Modified, true, false) => {
                // The previous state, stamped with this change's resourceVersion.
                let mut gone = Value::clone(event.previous.as_ref()?);
                gone["metadata"]["resourceVersion"] = json!(event.resource_version.to_string());
                Some((EventKind::Deleted, Arc::new(gone)))
            }
            _ => None,
        }
    }

    fn closed(&self) -> bool {
        self.closer.has_changed().unwrap_or(true)
            || self.setup.faults.is_stopping()
            || Instant::now() >= self.deadline
    }

    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        loop {
            if self.closed() {
                self.done = true;
                return None;
            }
            if !self.initial.is_empty() {
                let take = self.initial.len().min(INITIAL_CHUNK);
                for object in self.initial.drain(..take).collect::<Vec<_>>() {
                    self.write_object(&mut out, EventKind::Added, &object);
                }
                return Some(out.into());
            }
            if self.end_marker {
                self.end_marker = false;
                return Some(self.bookmark(true));
            }
            self.lines_added.borrow_and_update();
            if let Some(line) = self.setup.faults.take_watch_line(&self.setup.record) {
                return Some(line.into());
            }
            self.latest.borrow_and_update();
            let before = self.cursor;
            match self
                .setup
                .store
                .events_after(self.setup.ty.storage(), self.cursor, BATCH)
            {
                Err(crate::store::Error::Expired(expired)) => {
                    self.done = true;
                    let status = ApiStatus::new(
                        410,
                        "Expired",
                        format!(
                            "too old resource version: {} ({})",
                            expired.requested, expired.oldest
                        ),
                    );
                    Self::write(&mut out, "ERROR", &status.to_value());
                    return Some(out.into());
                }
                Err(other) => {
                    self.done = true;
                    Self::write(&mut out, "ERROR", &ApiStatus::from(other).to_value());
                    return Some(out.into());
                }
                Ok((events, reached)) => {
                    self.cursor = reached;
                    for event in &events {
                        if let Some((kind, object)) =
                            Self::translate(&self.setup.options.selection, event)
                        {
                            self.write_object(&mut out, kind, &object);
                        }
                    }
                }
            }
            if !out.is_empty() {
                return Some(out.into());
            }
            if self.cursor != before {
                continue;
            }
            if !self.setup.store.serves(self.setup.ty.storage()) {
                // The CRD was deleted: its watches end, as on the real server.
                self.done = true;
                return None;
            }
            let bookmarks = self.setup.options.allow_bookmarks;
            tokio::select! {
                changed = self.latest.changed() => if changed.is_err() { self.done = true; return None },
                _ = self.closer.changed() => { self.done = true; return None },
                _ = self.lines_added.changed() => {},
                () = tokio::time::sleep_until(self.deadline) => { self.done = true; return None },
                () = tokio::time::sleep_until(self.next_bookmark), if bookmarks => {
                    self.next_bookmark = Instant::now() + self.setup.bookmark_interval;
                    return Some(self.bookmark(false));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ResourceId;

    fn event(kind: EventKind, object: Value, previous: Option<Value>) -> StoredEvent {
        StoredEvent {
            resource_version: 7,
            kind,
            resource: ResourceId::core("pods"),
            key: ("default".into(), "p".into()),
            object: Arc::new(object),
            previous: previous.map(Arc::new),
        }
    }

    fn labelled(app: &str) -> Value {
        json!({"metadata": {"name": "p", "namespace": "default", "resourceVersion": "6", "labels": {"app": app}}})
    }

    #[test]
    fn selector_transitions_become_added_and_deleted() {
        let selection = Selection {
            label: "app=web".parse().unwrap(),
            ..Default::default()
        };
        let translate = |e: &StoredEvent| {
            WatchStream::translate(&selection, e)
                .map(|(k, o)| (k, o["metadata"]["resourceVersion"].clone()))
        };
        let stops = event(EventKind::Modified, labelled("db"), Some(labelled("web")));
        assert_eq!(translate(&stops), Some((EventKind::Deleted, json!("7"))));
        let starts = event(EventKind::Modified, labelled("web"), Some(labelled("db")));
        assert_eq!(translate(&starts).map(|t| t.0), Some(EventKind::Added));
        let stays = event(EventKind::Modified, labelled("web"), Some(labelled("web")));
        assert_eq!(translate(&stays).map(|t| t.0), Some(EventKind::Modified));
        let never = event(EventKind::Modified, labelled("db"), Some(labelled("db")));
        assert_eq!(translate(&never), None);
        assert_eq!(
            translate(&event(EventKind::Added, labelled("db"), None)),
            None
        );
    }

    #[test]
    fn start_positions_follow_the_api_rules() {
        let options = |send, rv| ListOptions {
            send_initial_events: send,
            resource_version: rv,
            ..Default::default()
        };
        assert_eq!(
            start_of(&options(None, None)),
            Start::Snapshot { end_marker: false }
        );
        assert_eq!(
            start_of(&options(None, Some(0))),
            Start::Snapshot { end_marker: false }
        );
        assert_eq!(start_of(&options(None, Some(5))), Start::After(5));
        assert_eq!(
            start_of(&options(Some(true), Some(0))),
            Start::Snapshot { end_marker: true }
        );
        assert_eq!(start_of(&options(Some(false), None)), Start::Now);
    }
}
