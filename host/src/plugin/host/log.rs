//! The `log` import and the plugin's log sink: every line a plugin writes (through `log` or to
//! stdout/stderr) becomes a tracing event tagged with the plugin's name, within a per-call budget.

use std::sync::Arc;

use super::HostState;
use crate::plugin::bindings::wasmformer::plugin::log::{self, Level};

/// Where a plugin's log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogSource {
    /// The `log` import.
    Log,
    /// WASI stdout (logged at info).
    Stdout,
    /// WASI stderr (logged at warn).
    Stderr,
}

/// One line a plugin logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The plugin's name.
    pub plugin: Arc<str>,
    /// Its level.
    pub level: tracing::Level,
    /// Where it came from.
    pub source: LogSource,
    /// The text, without trailing newline.
    pub message: String,
}

/// Receives every line plugins log, besides the tracing event (for `replay` and tests).
pub type LogObserver = Arc<dyn Fn(&LogLine) + Send + Sync>;

/// One instance's log: budget accounting and the partial lines of stdout/stderr.
pub(crate) struct LogSink {
    plugin: Arc<str>,
    budget: usize,
    used: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
    dropped_bytes_total: u64,
    partial: [Vec<u8>; 2],
    /// The call's last stderr lines, to explain a trap (a panic message).
    recent_stderr: Vec<String>,
    observer: Option<LogObserver>,
}

impl LogSink {
    pub(crate) fn new(plugin: Arc<str>, budget: usize, observer: Option<LogObserver>) -> Self {
        Self {
            plugin,
            budget,
            used: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
            dropped_bytes_total: 0,
            partial: [Vec::new(), Vec::new()],
            recent_stderr: Vec::new(),
            observer,
        }
    }

    /// Starts a call: the budget is per call.
    pub(crate) fn begin_call(&mut self) {
        self.used = 0;
        self.recent_stderr.clear();
    }

    /// Ends a call: flushes partial lines and reports what the budget dropped. Returns what the
    /// call's stderr says about how it ended: Rust's panic message if there is one, else the
    /// last stderr line.
    pub(crate) fn end_call(&mut self) -> Option<String> {
        for (i, source) in [LogSource::Stdout, LogSource::Stderr]
            .into_iter()
            .enumerate()
        {
            if !self.partial[i].is_empty() {
                let line =
                    String::from_utf8_lossy(&std::mem::take(&mut self.partial[i])).into_owned();
                self.emit(level_of(source), source, line);
            }
        }
        if self.dropped_lines > 0 {
            tracing::warn!(
                plugin.id = %self.plugin,
                // Not `log.*`: tracing-subscriber's text format hides fields of that prefix.
                output.droppedLines = self.dropped_lines,
                output.droppedBytes = self.dropped_bytes,
                output.budgetBytes = self.budget,
                "plugin log output over its per-call budget was dropped"
            );
            self.dropped_bytes_total += self.dropped_bytes;
            self.dropped_lines = 0;
            self.dropped_bytes = 0;
        }
        panic_message(&std::mem::take(&mut self.recent_stderr))
    }

    /// Bytes dropped over the budget in the calls that have ended.
    pub(crate) fn dropped_bytes_total(&self) -> u64 {
        self.dropped_bytes_total
    }

    /// Writes one line from the `log` import.
    pub(crate) fn line(&mut self, level: tracing::Level, message: String) {
        self.emit(level, LogSource::Log, message);
    }

    /// Appends stdout/stderr bytes, emitting each complete line.
    pub(crate) fn write(&mut self, source: LogSource, bytes: &[u8]) {
        let i = usize::from(source == LogSource::Stderr);
        if self.partial[i].len() + bytes.len() > self.budget {
            // A line longer than the whole budget: account for it without buffering it.
            self.dropped_lines += 1;
            self.dropped_bytes += (self.partial[i].len() + bytes.len()) as u64;
            self.partial[i].clear();
            return;
        }
        self.partial[i].extend_from_slice(bytes);
        while let Some(newline) = self.partial[i].iter().position(|b| *b == b'\n') {
            let rest = self.partial[i].split_off(newline + 1);
            let mut line = std::mem::replace(&mut self.partial[i], rest);
            line.pop();
            self.emit(
                level_of(source),
                source,
                String::from_utf8_lossy(&line).into_owned(),
            );
        }
    }

    fn emit(&mut self, level: tracing::Level, source: LogSource, message: String) {
        if source == LogSource::Stderr {
            if self.recent_stderr.len() == RECENT_STDERR_LINES {
                self.recent_stderr.remove(0);
            }
            self.recent_stderr.push(message.clone());
        }
        if self.used + message.len() > self.budget {
            self.dropped_lines += 1;
            self.dropped_bytes += message.len() as u64;
            return;
        }
        self.used += message.len();
        let stream = match source {
            LogSource::Log => "log",
            LogSource::Stdout => "stdout",
            LogSource::Stderr => "stderr",
        };
        match level {
            tracing::Level::ERROR => {
                tracing::event!(target: "plugin", tracing::Level::ERROR, { plugin.id = %self.plugin, stream }, "{}", message)
            }
            tracing::Level::WARN => {
                tracing::event!(target: "plugin", tracing::Level::WARN, { plugin.id = %self.plugin, stream }, "{}", message)
            }
            tracing::Level::INFO => {
                tracing::event!(target: "plugin", tracing::Level::INFO, { plugin.id = %self.plugin, stream }, "{}", message)
            }
            tracing::Level::DEBUG => {
                tracing::event!(target: "plugin", tracing::Level::DEBUG, { plugin.id = %self.plugin, stream }, "{}", message)
            }
            tracing::Level::TRACE => {
                tracing::event!(target: "plugin", tracing::Level::TRACE, { plugin.id = %self.plugin, stream }, "{}", message)
            }
        }
        if let Some(observer) = &self.observer {
            observer(&LogLine {
                plugin: self.plugin.clone(),
                level,
                source,
                message,
            });
        }
    }
}

/// How many of a call's last stderr lines are kept to explain a trap.
const RECENT_STDERR_LINES: usize = 8;

/// Rust prints `thread '…' panicked at FILE:LINE:COL:`, then the message, then a `note:` line.
fn panic_message(lines: &[String]) -> Option<String> {
    let Some(at) = lines.iter().rposition(|l| l.contains("panicked at")) else {
        return lines.last().cloned();
    };
    let location = lines[at]
        .split("panicked at")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .trim_end_matches(':');
    let message: Vec<&str> = lines[at + 1..]
        .iter()
        .map(String::as_str)
        .take_while(|l| !l.starts_with("note:"))
        .collect();
    Some(format!("panicked at {location}: {}", message.join(" ")))
}

fn level_of(source: LogSource) -> tracing::Level {
    if source == LogSource::Stderr {
        tracing::Level::WARN
    } else {
        tracing::Level::INFO
    }
}

impl log::Host for HostState {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.check_deadline()?;
        let level = match level {
            Level::Trace => tracing::Level::TRACE,
            Level::Debug => tracing::Level::DEBUG,
            Level::Info => tracing::Level::INFO,
            Level::Warn => tracing::Level::WARN,
            Level::Error => tracing::Level::ERROR,
        };
        self.log
            .lock()
            .expect("log sink lock poisoned")
            .line(level, message);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn sink(budget: usize) -> (LogSink, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let observer: LogObserver = {
            let seen = seen.clone();
            Arc::new(move |line: &LogLine| seen.lock().unwrap().push(line.message.clone()))
        };
        (LogSink::new("p".into(), budget, Some(observer)), seen)
    }

    #[test]
    fn splits_stdout_into_lines_and_flushes_the_rest_at_call_end() {
        let (mut s, seen) = sink(1000);
        s.begin_call();
        s.write(LogSource::Stdout, b"one\ntw");
        s.write(LogSource::Stdout, b"o\nthree");
        assert_eq!(*seen.lock().unwrap(), ["one", "two"]);
        s.end_call();
        assert_eq!(*seen.lock().unwrap(), ["one", "two", "three"]);
    }

    #[test]
    fn drops_lines_over_the_per_call_budget() {
        let (mut s, seen) = sink(10);
        s.begin_call();
        for _ in 0..5 {
            s.line(tracing::Level::INFO, "abcd".into());
        }
        assert_eq!(seen.lock().unwrap().len(), 2);
        assert_eq!(s.dropped_lines, 3);
        s.end_call();
        s.begin_call();
        s.line(tracing::Level::INFO, "again".into());
        assert_eq!(seen.lock().unwrap().len(), 3, "budget resets per call");
    }

    #[test]
    fn explains_a_call_by_its_panic_message_or_last_stderr_line() {
        let (mut s, _) = sink(1000);
        s.begin_call();
        s.write(LogSource::Stderr, b"\nthread '<unnamed>' panicked at src/lib.rs:3:5:\nboom\nnote: run with `RUST_BACKTRACE=1`\n");
        assert_eq!(
            s.end_call().as_deref(),
            Some("panicked at src/lib.rs:3:5: boom")
        );
        s.begin_call();
        s.write(LogSource::Stderr, b"first\nlast words\n");
        assert_eq!(s.end_call().as_deref(), Some("last words"));
        s.begin_call();
        assert_eq!(s.end_call(), None);
    }
}
