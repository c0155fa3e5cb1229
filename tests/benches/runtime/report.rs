//! The runtime benchmark's report: the markdown tables `scripts/bench` writes into BENCHMARKS.md,
//! with each goal's verdict.

use std::sync::atomic::Ordering;

use wasmformer_tests::guests;

use super::table::{Table, ns};
use super::{Bench, FAILURES, FRESH_PAGES, Objects, RSS_INSTANCES, STORE_PODS};

fn us(value_ns: f64) -> String {
    format!("{:.2} µs", value_ns / 1000.0)
}

/// A goal's text and whether the run met it.
fn goal(bench: &Bench, id: &str) -> Option<(String, bool)> {
    let m = |id: &str| bench.median(id);
    let verdict = |text: String, met: bool| Some((text, met));
    match id {
        // Issue 17, item 9 raised the goals of 1, 2 and 5a (from < 1 µs, ≤ 1.5 µs, < 2 µs).
        "1-empty" => verdict("≤ 0.4 µs".into(), m(id)? <= 400.0),
        "2-labels-wasm" => verdict("≤ 0.8 µs".into(), m(id)? <= 800.0),
        "3-decode-wasm" => {
            // Prefer the figures timed in alternating batches: both sides saw the same load.
            let paired = bench.pairs.get("pair-decode").map(|(_, p)| p.ratio.median);
            let ratio = paired.or_else(|| Some(m(id)? / m("4c-decode-native")?))?;
            verdict(format!("≤ 1.3× native: {ratio:.2}×"), ratio <= 1.3)
        }
        "5a-lister-get" => {
            let paired = bench
                .pairs
                .get("pair-get")
                .map(|(_, p)| p.difference.median);
            let get = paired.or_else(|| Some(m(id)? - m("1-empty")?))?;
            verdict(format!("the get ≤ 0.8 µs: {}", us(get)), get <= 800.0)
        }
        // Per listed object against what a `get` pays for its one object: a list should cost no
        // more per object. The get is of each of the other 999 Pods in turn (found minus
        // not-found, pair-get-each), so both sides fetch objects not in the CPU's cache; a get
        // repeated of one Pod (pair-get − pair-get-missing) has it cached, which no list of
        // 1,000 can (until 2026-12-05 the goal was read against that one). 5f: the same objects
        // read a page at a time.
        "5d-lister-list" => per_listed_object(bench, "pair-list"),
        "5f-lister-pages" => per_listed_object(bench, "pair-pages"),
        "10a-admit-watched" => {
            let paired = bench.pairs.get("pair-admit").map(|(_, p)| p.ratio.median);
            let ratio = paired.or_else(|| Some(m(id)? / m("10c-parse-value")?))?;
            verdict(format!("≤ 1.5× one parse: {ratio:.2}×"), ratio <= 1.5)
        }
        "6a-start-empty" => verdict("≤ 10 µs".into(), m(id)? <= 10_000.0),
        "7a-load-cached-empty" => verdict("< 1 ms".into(), m(id)? < 1e6),
        "7b-load-cached-decode" => verdict("≤ 0.4 ms".into(), m(id)? <= 0.4e6),
        "9b-reactivate-1mib" => verdict("≤ 1 ms".into(), m(id)? <= 1e6),
        _ => None,
    }
}

/// Item 8's goal for the list timed by the pair `list_pair`: per object ≤ a `get`'s object.
fn per_listed_object(bench: &Bench, list_pair: &str) -> Option<(String, bool)> {
    let pair = |id: &str| bench.pairs.get(id).map(|(_, p)| p.difference.median);
    let per_object = pair(list_pair)? / STORE_PODS as f64;
    let get_object = pair("pair-get-each")?;
    Some((
        format!(
            "per object ≤ a get's object ({}): {}",
            us(get_object),
            us(per_object)
        ),
        per_object <= get_object,
    ))
}

/// Prints every table: the rows, the pairs, derived figures, the objects and the plugin sizes.
/// `rss`: per instance, idle, touched and unloaded, with the default `keepResidentBytes` (16384)
/// and with 0.
pub fn print(
    bench: &Bench,
    objects: &Objects,
    rss: Option<[(f64, f64, f64); 2]>,
    reserved_kib: u64,
) {
    let figures = ["what", "median ns/op", "p99 ns/op", "min ns/op", "goal", ""].map(String::from);
    let mut table = Table::new("id", &figures)
        .text_column(1)
        .text_column(5)
        .text_column(6);
    for (id, (what, stats)) in &bench.results {
        let (goal_text, verdict) = match goal(bench, id) {
            Some((text, true)) => (text, "met"),
            Some((text, false)) => (text, "**missed**"),
            None => (String::new(), ""),
        };
        table.row(vec![
            id.to_string(),
            what.clone(),
            ns(stats.median),
            ns(stats.p99),
            ns(stats.min),
            goal_text,
            verdict.to_owned(),
        ]);
    }
    table.print();

    if !bench.pairs.is_empty() {
        println!(
            "\n| pair, timed in alternating batches | a / b | a − b, µs | middle half of a − b, µs |\n|---|--:|--:|--:|"
        );
        for (id, (what, pair)) in &bench.pairs {
            let (r, d) = (pair.ratio, pair.difference);
            println!(
                "| {id}: {what} | {:.2}× | {:.2} | {:.2} – {:.2} |",
                r.median,
                d.median / 1e3,
                d.q25 / 1e3,
                d.q75 / 1e3
            );
        }
    }

    let m = |id: &str| bench.median(id);
    let mut derived: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            derived.push((name.to_owned(), value));
        }
    };
    push(
        "labels handler, wasm / native (2 / 4a)",
        m("2-labels-wasm")
            .zip(m("4a-labels-native"))
            .map(|(w, n)| format!("{:.0}×", w / n)),
    );
    push(
        "decode handler, wasm / native with the copy (3 / 4d)",
        m("3-decode-wasm")
            .zip(m("4d-decode-native-copy"))
            .map(|(w, n)| format!("{:.2}×", w / n)),
    );
    push(
        "`start` beyond one empty call (6a − 8b)",
        m("6a-start-empty")
            .zip(m("8b-empty-minimal"))
            .map(|(a, b)| us(a - b)),
    );
    push(
        "`lister.list` per object (pair-list a − b / 1,000)",
        bench
            .pairs
            .get("pair-list")
            .map(|(_, p)| us(p.difference.median / STORE_PODS as f64)),
    );
    push(
        "`lister.list-page` per object, pages of 64 (pair-pages a − b / 1,000)",
        bench
            .pairs
            .get("pair-pages")
            .map(|(_, p)| us(p.difference.median / STORE_PODS as f64)),
    );
    push(
        "a `get`'s object, the same Pod each time (pair-get − pair-get-missing)",
        bench
            .pairs
            .get("pair-get")
            .zip(bench.pairs.get("pair-get-missing"))
            .map(|((_, a), (_, b))| us(a.difference.median - b.difference.median)),
    );
    push(
        "a `get`'s object, each of the other 999 Pods in turn (pair-get-each a − b)",
        bench
            .pairs
            .get("pair-get-each")
            .map(|(_, p)| us(p.difference.median)),
    );
    push(
        "cached load not spent reading and hashing (7b − 7e − 7f)",
        m("7b-load-cached-decode")
            .zip(m("7e-read-decode-wasm"))
            .zip(m("7f-hash-decode-wasm"))
            .map(|((a, b), c)| us(a - b - c)),
    );
    push(
        &format!(
            "page faults per event to an unloaded plugin with 1 MiB of state (9b; 9e takes {FRESH_PAGES})"
        ),
        bench
            .page_faults
            .get("9b-reactivate-1mib")
            .map(|faults| format!("{faults:.0}")),
    );
    push(
        "event to an unloaded plugin with 1 MiB of state, beyond its fresh-page floor (9b − 9e)",
        m("9b-reactivate-1mib")
            .zip(m("9e-fresh-pages-2mib"))
            .map(|(a, b)| us(a - b)),
    );
    if let Some([(idle, touched, unloaded), (_, _, unloaded_given_back)]) = rss {
        push(
            &format!("RSS per live instance, idle after `start` ({RSS_INSTANCES} instances)"),
            Some(format!("{idle:.0} KiB")),
        );
        push(
            "RSS per live instance, after one realistic-Pod event",
            Some(format!("{touched:.0} KiB")),
        );
        push(
            "RSS per plugin unloaded after that event (`lifecycle.unloadAfter`; goal ≤ 16 KiB)",
            Some(format!("{unloaded:.1} KiB")),
        );
        push(
            "RSS per plugin unloaded after that event, `keepResidentBytes: 0`",
            Some(format!("{unloaded_given_back:.1} KiB")),
        );
    }
    derived.push((
        format!(
            "address space one engine reserves (its instance pool of {} instances)",
            wasmformer::plugin::DEFAULT_MAX_INSTANCES
        ),
        format!("{:.2} TiB", reserved_kib as f64 / (1u64 << 30) as f64),
    ));
    if !derived.is_empty() {
        println!("\n| derived | value |\n|---|--:|");
        for (name, value) in derived {
            println!("| {name} | {value} |");
        }
    }

    println!(
        "\n| object (as cached: managed fields stripped) | body bytes | labels |\n|---|--:|--:|"
    );
    for (name, obj) in [
        ("realistic Pod", &objects.realistic),
        ("metadata only", &objects.metadata_only),
        ("minimal Pod", &objects.minimal),
    ] {
        println!("| {name} | {} | {} |", obj.body().len(), obj.labels().len());
    }

    println!("\n| component | .wasm bytes |\n|---|--:|");
    for (package, path) in guests::ALL
        .iter()
        .filter(|(p, _)| p.starts_with("guest-bench-") || !p.starts_with("guest-"))
    {
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        println!("| {package} | {} |", ns(bytes as f64));
    }

    let failures = FAILURES.load(Ordering::Relaxed);
    if failures > 0 {
        println!(
            "\n{failures} call(s) or start(s) failed during this run (see stderr): on a loaded machine a preempted call can overrun the 100 ms wall-clock deadline."
        );
    }
}
