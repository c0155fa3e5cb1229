//! [`Gate`]: whether a plugin's worker may call handlers. With leader election a plugin is
//! started for one leadership term; its worker checks the gate before every call and stops
//! delivering as soon as that term ends, without waiting for the runtime to tear it down.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The replica's current leadership term: `0` while it does not lead. Written by the leader
/// clock (`runtime::leader`), read by every worker.
#[derive(Debug, Clone, Default)]
pub struct Terms(Arc<AtomicU64>);

impl Terms {
    /// Starts a new term and returns its number (never `0`).
    pub fn begin(&self, term: u64) {
        debug_assert!(term != 0, "term 0 means not leading");
        self.0.store(term, Ordering::SeqCst);
    }

    /// Ends the current term: every gate of it closes.
    pub fn end(&self) {
        self.0.store(0, Ordering::SeqCst);
    }

    /// The current term, `0` if none.
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// The gate of term `term`.
    pub fn gate(&self, term: u64) -> Gate {
        Gate {
            terms: Some(self.clone()),
            term,
        }
    }
}

/// Open while the term a plugin was started in lasts; always open without leader election.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    terms: Option<Terms>,
    term: u64,
}

impl Gate {
    /// A gate that never closes (a single replica).
    pub fn always() -> Self {
        Self::default()
    }

    /// Whether handlers may be called now.
    pub fn is_open(&self) -> bool {
        self.terms
            .as_ref()
            .is_none_or(|terms| terms.current() == self.term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_closes_with_its_term_and_stays_closed_in_the_next() {
        let terms = Terms::default();
        terms.begin(1);
        let gate = terms.gate(1);
        assert!(gate.is_open());
        terms.end();
        assert!(!gate.is_open());
        terms.begin(2);
        assert!(
            !gate.is_open(),
            "a later term does not reopen an earlier gate"
        );
        assert!(terms.gate(2).is_open());
        assert!(Gate::always().is_open());
    }
}
