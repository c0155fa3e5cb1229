//! [`Feed`]: a replay script turned into watch events and passed through the informer's
//! [`Reflector`], one per kind, so `replay` delivers what the live informer would.
//!
//! - `initial` is each kind's first list (`Init`, `InitApply`…, `InitDone`): adds marked initial.
//! - `add` and `update` are watch `ADDED`/`MODIFIED` events: one with the cached resourceVersion
//!   delivers nothing, one with a new uid under a cached name is a `final-state-unknown` delete
//!   of the old object followed by an add.
//! - `delete` is a watch `DELETED` event, delivering the object as the script writes it (a real
//!   `DELETED` event carries the final state); with `finalStateUnknown: true` it is a relist of
//!   the kind that lacks the object, which delivers the cached object as a tombstone.

use std::collections::{BTreeMap, HashMap, VecDeque};

use kube::runtime::watcher;
use serde_json::Value;

use super::{Script, ScriptError, ScriptStep, Step, Stores};
use crate::cache::{Event, Gvk, ObjectKey};
use crate::informer::reflector::Reflector;
use crate::informer::watch::wire_event;

/// The events a script delivers, each after the cache has been updated for it.
#[derive(Debug)]
pub struct Feed {
    stores: Stores,
    reflectors: BTreeMap<Gvk, Reflector>,
    /// The initial objects, until the first call to [`Feed::next`] lists them.
    initial: Option<Vec<(Gvk, Value)>>,
    steps: VecDeque<ScriptStep>,
    pending: VecDeque<(Gvk, Event)>,
}

impl Feed {
    /// Checks `script` ([`Script::check`]) and prepares its stores; nothing is applied yet.
    pub fn new(script: &Script) -> Result<Self, ScriptError> {
        script.check()?;
        let stores = script.stores()?;
        let reflectors = stores
            .iter()
            .map(|(gvk, store)| {
                (
                    gvk.clone(),
                    Reflector::new(store.clone()).expecting(gvk.api_version(), gvk.kind.clone()),
                )
            })
            .collect();
        Ok(Self {
            stores,
            reflectors,
            initial: Some(script.initial_objects()?),
            steps: script.steps()?.into(),
            pending: VecDeque::new(),
        })
    }

    /// One store per kind the script mentions, as the events so far left them.
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The next event for a plugin (never `Synced`) and its kind; the stores already reflect it.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(Gvk, Event)> {
        loop {
            if let Some(next) = self.pending.pop_front() {
                return Some(next);
            }
            if let Some(initial) = self.initial.take() {
                self.list_initial(initial);
                continue;
            }
            let step = self.steps.pop_front()?;
            self.apply(step);
        }
    }

    fn reflect(&mut self, gvk: &Gvk, events: Vec<watcher::Event<Value>>) {
        let reflector = self
            .reflectors
            .get_mut(gvk)
            .expect("a reflector for every kind of the script");
        for event in events {
            // An object that is not one (the reflector would reject it) changes nothing.
            let Some(event) = wire_event(event) else {
                continue;
            };
            reflector.apply(event, &mut |event| {
                // `replay` reports calls: `Synced` calls nothing.
                if event != Event::Synced {
                    self.pending.push_back((gvk.clone(), event));
                }
            });
        }
    }

    /// Every kind's first list; the initial adds in script order.
    fn list_initial(&mut self, initial: Vec<(Gvk, Value)>) {
        let mut order: HashMap<(Gvk, ObjectKey), usize> = HashMap::new();
        let mut lists: BTreeMap<Gvk, Vec<watcher::Event<Value>>> = BTreeMap::new();
        for (i, (gvk, value)) in initial.into_iter().enumerate() {
            if let Ok(obj) = self.stores[&gvk].admit(value.clone()) {
                order.entry((gvk.clone(), obj.key().clone())).or_insert(i);
            }
            lists
                .entry(gvk)
                .or_default()
                .push(watcher::Event::InitApply(value));
        }
        let kinds: Vec<Gvk> = self.reflectors.keys().cloned().collect();
        for gvk in kinds {
            let mut events = vec![watcher::Event::Init];
            events.extend(lists.remove(&gvk).unwrap_or_default());
            events.push(watcher::Event::InitDone);
            self.reflect(&gvk, events);
        }
        let mut adds: Vec<(Gvk, Event)> = self.pending.drain(..).collect();
        adds.sort_by_key(|(gvk, event)| {
            event
                .object()
                .and_then(|obj| order.get(&(gvk.clone(), obj.key().clone())))
                .copied()
        });
        self.pending.extend(adds);
    }

    fn apply(&mut self, ScriptStep { gvk, step, .. }: ScriptStep) {
        let events = match step {
            Step::Add(value) | Step::Update(value) => vec![watcher::Event::Apply(value)],
            Step::Delete {
                value,
                final_state_unknown: false,
            } => vec![watcher::Event::Delete(value)],
            Step::Delete {
                value,
                final_state_unknown: true,
            } => {
                // The object vanished while the watch was down: a relist without it.
                let store = &self.stores[&gvk];
                let gone = store.admit(value).map(|obj| obj.key().clone()).ok();
                let mut events = vec![watcher::Event::Init];
                for obj in store.snapshot() {
                    if Some(obj.key()) != gone.as_ref()
                        && let Ok(value) = serde_json::from_str(obj.body())
                    {
                        events.push(watcher::Event::InitApply(value));
                    }
                }
                events.push(watcher::Event::InitDone);
                events
            }
        };
        self.reflect(&gvk, events);
    }
}

#[cfg(test)]
#[path = "feed_tests.rs"]
mod tests;
