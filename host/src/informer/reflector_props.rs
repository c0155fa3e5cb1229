//! Property tests: random histories of a server (changes seen live, repeated events, watches that
//! expired so changes were missed and a relist followed, lists interrupted half-way) fed through
//! the [`Reflector`] into a recorder, checked against client-go's rules:
//!
//! - the store ends equal to the server, and so does a handler that applies every delta;
//! - per object the deltas continue its history: an add only for an object the handler does not
//!   hold (no duplicate add), an update or delete only of the object the handler holds;
//! - no update whose resourceVersion equals the old one (nothing for an unchanged object);
//! - a relist delivers a tombstone (`final_state_unknown`) for every object that vanished (or was
//!   recreated under a new uid) during the gap, and no other.

use std::collections::{BTreeMap, BTreeSet};

use kube::runtime::watcher::Event as WatchEvent;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::cache::Gvk;

const NAMES: usize = 5;

/// A change on the server.
#[derive(Debug, Clone)]
enum Change {
    Create(usize),
    Update(usize),
    Delete(usize),
    /// Deleted and created again under the same name (a new uid).
    Recreate(usize),
}

/// What the informer goes through.
#[derive(Debug, Clone)]
enum Step {
    /// A change, seen live on the watch.
    Live(Change),
    /// The server sends the last event again (a re-watch from an older resourceVersion).
    Repeat,
    /// The watch expired (410): `missed` happened unseen, then a relist, maybe interrupted once.
    Relist {
        missed: Vec<Change>,
        interrupted: bool,
        reversed: bool,
    },
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (0..NAMES).prop_map(Change::Create),
        (0..NAMES).prop_map(Change::Update),
        (0..NAMES).prop_map(Change::Delete),
        (0..NAMES).prop_map(Change::Recreate),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => change().prop_map(Step::Live),
        1 => Just(Step::Repeat),
        2 => (prop::collection::vec(change(), 0..6), any::<bool>(), any::<bool>())
            .prop_map(|(missed, interrupted, reversed)| Step::Relist { missed, interrupted, reversed }),
    ]
}

/// The server: objects by name, as (uid, resourceVersion).
#[derive(Debug, Default)]
struct Server {
    objects: BTreeMap<String, (u64, u64)>,
    rv: u64,
    uids: u64,
}

fn pod(name: &str, uid: u64, rv: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": name, "uid": format!("u{uid}"), "resourceVersion": rv.to_string()}})
}

impl Server {
    /// Applies `change`, returning the watch events it causes.
    fn apply(&mut self, change: &Change) -> Vec<WatchEvent<Value>> {
        let name = |i: &usize| format!("p{i}");
        match change {
            Change::Create(i) | Change::Update(i) => {
                self.rv += 1;
                let uid = match self.objects.get(&name(i)) {
                    Some((uid, _)) => *uid,
                    None => {
                        self.uids += 1;
                        self.uids
                    }
                };
                self.objects.insert(name(i), (uid, self.rv));
                vec![WatchEvent::Apply(pod(&name(i), uid, self.rv))]
            }
            Change::Delete(i) => match self.objects.remove(&name(i)) {
                Some((uid, _)) => {
                    self.rv += 1;
                    vec![WatchEvent::Delete(pod(&name(i), uid, self.rv))]
                }
                None => vec![],
            },
            Change::Recreate(i) => {
                let mut events = self.apply(&Change::Delete(*i));
                self.uids += 1;
                self.rv += 1;
                self.objects.insert(name(i), (self.uids, self.rv));
                events.push(WatchEvent::Apply(pod(&name(i), self.uids, self.rv)));
                events
            }
        }
    }

    fn list(&self, reversed: bool) -> Vec<WatchEvent<Value>> {
        let mut items: Vec<WatchEvent<Value>> = self
            .objects
            .iter()
            .map(|(name, (uid, rv))| WatchEvent::InitApply(pod(name, *uid, *rv)))
            .collect();
        if reversed {
            items.reverse();
        }
        items
    }
}

/// A handler that applies every delta and checks it continues what it holds.
#[derive(Debug, Default)]
struct Handler {
    /// name → (uid, resourceVersion).
    objects: BTreeMap<String, (String, String)>,
    tombstones: BTreeSet<String>,
}

impl Handler {
    fn take(&mut self, delta: Event) -> Result<(), String> {
        let id = |obj: &CachedObject| (obj.uid().to_owned(), obj.resource_version().to_owned());
        match delta {
            Event::Add { obj, .. } => {
                if self
                    .objects
                    .insert(obj.name().to_owned(), id(&obj))
                    .is_some()
                {
                    return Err(format!("add of {}, which the handler holds", obj.name()));
                }
            }
            Event::Update { old, new } => {
                if old.resource_version() == new.resource_version() {
                    return Err(format!(
                        "update of {} with an unchanged resourceVersion",
                        new.name()
                    ));
                }
                if old.uid() != new.uid() {
                    return Err(format!("update of {} across uids", new.name()));
                }
                if self.objects.get(new.name()) != Some(&id(&old)) {
                    return Err(format!(
                        "update of {} from {:?}, handler holds {:?}",
                        new.name(),
                        id(&old),
                        self.objects.get(new.name())
                    ));
                }
                self.objects.insert(new.name().to_owned(), id(&new));
            }
            Event::Delete {
                obj,
                final_state_unknown,
            } => {
                let held = self.objects.remove(obj.name());
                if held.as_ref().map(|(uid, _)| uid) != Some(&obj.uid().to_owned()) {
                    return Err(format!(
                        "delete of {} {:?}, handler holds {held:?}",
                        obj.name(),
                        id(&obj)
                    ));
                }
                if final_state_unknown {
                    self.tombstones.insert(obj.name().to_owned());
                }
            }
            Event::Synced => {}
        }
        Ok(())
    }
}

fn check(initial: Vec<Change>, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let store = Arc::new(Store::new(Gvk::from_api_version("v1", "Pod"), vec![], true));
    let mut reflector = Reflector::new(store.clone()).expecting("v1", "Pod");
    let mut server = Server::default();
    let mut handler = Handler::default();
    let feed = |reflector: &mut Reflector,
                handler: &mut Handler,
                events: Vec<WatchEvent<Value>>|
     -> Result<(), TestCaseError> {
        for event in events {
            let event = crate::informer::watch::wire_event(event).expect("objects are objects");
            let mut deltas = Vec::new();
            prop_assert_eq!(reflector.apply(event, &mut |d| deltas.push(d)), 0);
            for delta in deltas {
                handler.take(delta).map_err(TestCaseError::fail)?;
            }
        }
        Ok(())
    };
    for change in &initial {
        server.apply(change);
    }
    let mut list = vec![WatchEvent::Init];
    list.extend(server.list(false));
    list.push(WatchEvent::InitDone);
    feed(&mut reflector, &mut handler, list)?;
    let mut last: Option<WatchEvent<Value>> = None;
    for step in steps {
        match step {
            Step::Live(change) => {
                let events = server.apply(&change);
                last = events.last().cloned().or(last);
                feed(&mut reflector, &mut handler, events)?;
            }
            Step::Repeat => {
                // Only the latest event of an object can be repeated: kube resumes from the last
                // resourceVersion it saw.
                if let Some(event) = last.clone() {
                    feed(&mut reflector, &mut handler, vec![event])?;
                }
            }
            Step::Relist {
                missed,
                interrupted,
                reversed,
            } => {
                let before: BTreeMap<String, String> = handler
                    .objects
                    .iter()
                    .map(|(n, (uid, _))| (n.clone(), uid.clone()))
                    .collect();
                for change in &missed {
                    server.apply(change);
                }
                last = None;
                let mut events = vec![WatchEvent::Init];
                if interrupted {
                    let partial = server.list(!reversed);
                    let half = partial.len() / 2;
                    events.extend(partial.into_iter().take(half));
                    events.push(WatchEvent::Init);
                }
                events.extend(server.list(reversed));
                events.push(WatchEvent::InitDone);
                handler.tombstones.clear();
                feed(&mut reflector, &mut handler, events)?;
                let vanished: BTreeSet<String> = before
                    .iter()
                    .filter(|(name, uid)| {
                        server
                            .objects
                            .get(*name)
                            .is_none_or(|(now, _)| &format!("u{now}") != *uid)
                    })
                    .map(|(name, _)| name.clone())
                    .collect();
                prop_assert_eq!(
                    &handler.tombstones,
                    &vanished,
                    "tombstones after missing {:?}",
                    missed
                );
            }
        }
    }
    let expected: BTreeMap<String, (String, String)> = server
        .objects
        .iter()
        .map(|(name, (uid, rv))| (name.clone(), (format!("u{uid}"), rv.to_string())))
        .collect();
    prop_assert_eq!(
        &handler.objects,
        &expected,
        "the handler's view is the server's"
    );
    let stored: BTreeMap<String, (String, String)> = store
        .snapshot()
        .iter()
        .map(|o| {
            (
                o.name().to_owned(),
                (o.uid().to_owned(), o.resource_version().to_owned()),
            )
        })
        .collect();
    prop_assert_eq!(&stored, &expected, "the store is the server's");
    Ok(())
}

// Cases: `PROPTEST_CASES` (proptest's default: 256).
proptest! {
    #[test]
    fn deltas_follow_client_go_rules(
        initial in prop::collection::vec(change(), 0..8),
        steps in prop::collection::vec(step(), 0..40),
    ) {
        check(initial, steps)?;
    }
}
