use super::*;

#[test]
fn accept_chooses_openmetrics_only_when_asked() {
    assert_eq!(Format::from_accept(None), Format::Text);
    assert_eq!(
        Format::from_accept(Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1")),
        Format::Text
    );
    assert_eq!(
        Format::from_accept(Some(
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
        )),
        Format::OpenMetrics
    );
}

#[test]
fn a_plugin_call_shows_under_its_version_and_openmetrics_ends_with_eof() {
    let metrics = Metrics::new();
    let plugin = metrics.plugin("rec");
    plugin.running("0123456789abcdef", "0.2.0");
    plugin.handler_call("add", CallResult::Ok, std::time::Duration::from_millis(2));
    plugin.handler_call(
        "add",
        CallResult::Deadline,
        std::time::Duration::from_millis(100),
    );
    plugin.running("fedcba9876543210", "0.2.1");
    let text = metrics.encode(Format::Text);
    assert!(text.contains(r#"wasmformer_handler_calls_total{plugin="rec",version="0123456789ab",event="add",result="deadline"} 1"#), "{text}");
    assert!(
        text.contains(
            r#"wasmformer_plugin_info{plugin="rec",version="fedcba987654",contract="0.2.1"} 1"#
        ),
        "{text}"
    );
    assert!(
        !text.contains(r#"version="0123456789ab",contract"#),
        "the old version's info is gone: {text}"
    );
    assert!(
        text.contains(r#"wasmformer_handler_duration_seconds_count{plugin="rec",event="add"} 2"#),
        "{text}"
    );
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
    assert!(metrics.encode(Format::OpenMetrics).ends_with("# EOF\n"));

    // Started again under the same name (re-subscribed): still one info series.
    metrics.plugin("rec").running("aaaaaaaaaaaaaaaa", "0.2.0");
    let text = metrics.encode(Format::Text);
    assert_eq!(text.matches("wasmformer_plugin_info{").count(), 1, "{text}");
}

#[test]
fn work_in_progress_shows_as_unfinished_until_it_ends() {
    let metrics = Metrics::new();
    let plugin = metrics.plugin("slow");
    let work = plugin.queue.work();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let during = metrics.encode(Format::Text);
    drop(work);
    let after = metrics.encode(Format::Text);
    let value = |text: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(r#"workqueue_unfinished_work_seconds{name="slow"}"#))
            .expect("series present");
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value(&during) >= 0.02, "{during}");
    assert_eq!(value(&after), 0.0);
    assert!(
        after.contains(r#"workqueue_work_duration_seconds_count{name="slow"} 1"#),
        "{after}"
    );
}

/// A handler call's series are kept after the first call, per version: a version change made
/// through any handle of the plugin (a hot swap's) sends later calls to the new version's series.
#[test]
fn kept_call_series_follow_the_running_version() {
    let ms = std::time::Duration::from_millis;
    let metrics = Metrics::new();
    let plugin = metrics.plugin("rec");
    let swap = metrics.plugin("rec");
    plugin.running("0123456789abcdef", "0.3.0");
    plugin.handler_call("add", CallResult::Ok, ms(1));
    plugin.handler_call("add", CallResult::Ok, ms(1));
    swap.running("fedcba9876543210", "0.3.0");
    plugin.handler_call("add", CallResult::Ok, ms(1));
    plugin.handler_call("update", CallResult::Error, ms(1));
    let text = metrics.encode(Format::Text);
    for line in [
        r#"wasmformer_handler_calls_total{plugin="rec",version="0123456789ab",event="add",result="ok"} 2"#,
        r#"wasmformer_handler_calls_total{plugin="rec",version="fedcba987654",event="add",result="ok"} 1"#,
        r#"wasmformer_handler_calls_total{plugin="rec",version="fedcba987654",event="update",result="error"} 1"#,
        r#"wasmformer_handler_duration_seconds_count{plugin="rec",event="add"} 3"#,
        r#"wasmformer_handler_duration_seconds_count{plugin="rec",event="update"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
}

#[test]
fn the_calls_a_plugin_expects_show_at_zero_under_each_version_it_runs() {
    let metrics = Metrics::new();
    let plugin = metrics.plugin("idle");
    plugin.expect_calls(&["add", "update"]);
    let text = metrics.encode(Format::Text);
    assert!(
        !text.contains(r#"wasmformer_handler_calls_total{plugin="idle""#),
        "no series before a version runs: {text}"
    );
    plugin.running("0123456789abcdef", "0.3.0");
    let text = metrics.encode(Format::Text);
    for event in ["add", "update"] {
        assert!(text.contains(&format!(r#"wasmformer_handler_calls_total{{plugin="idle",version="0123456789ab",event="{event}",result="ok"}} 0"#)), "{text}");
        assert!(
            text.contains(&format!(
                r#"wasmformer_handler_duration_seconds_count{{plugin="idle",event="{event}"}} 0"#
            )),
            "{text}"
        );
    }
    assert!(!text.contains(r#"event="delete""#), "{text}");

    let ms = std::time::Duration::from_millis;
    plugin.handler_call("add", CallResult::Ok, ms(1));
    plugin.running("fedcba9876543210", "0.3.1");
    plugin.handler_call("update", CallResult::Ok, ms(1));
    let text = metrics.encode(Format::Text);
    assert!(text.contains(r#"wasmformer_handler_calls_total{plugin="idle",version="0123456789ab",event="add",result="ok"} 1"#), "{text}");
    assert!(text.contains(r#"wasmformer_handler_calls_total{plugin="idle",version="fedcba987654",event="add",result="ok"} 0"#), "{text}");
    assert!(text.contains(r#"wasmformer_handler_calls_total{plugin="idle",version="fedcba987654",event="update",result="ok"} 1"#), "{text}");
    assert!(
        text.contains(r#"wasmformer_handler_duration_seconds_count{plugin="idle",event="add"} 1"#),
        "{text}"
    );
}
