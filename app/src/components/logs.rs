//! A rental's live workload log: the last output when the page opens, then every new line as
//! it is written (Server-Sent Events from `/api/v1/rentals/{id}/logs?follow=true`, opened after
//! hydration). Pause stops following and remembers where it was; resume goes on from there, so
//! nothing is missed or shown twice. The whole kept log downloads as a file.

use leptos::prelude::*;

/// How much output the page keeps (older lines scroll off; the download has them all).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const KEEP_BYTES: usize = 256 << 10;

/// Where the feed stands, for the badge (the server renders it connecting).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
enum Feed {
    Connecting,
    Live,
    Paused,
    Waiting(String),
    Ended(String),
}

impl Feed {
    fn label(&self) -> String {
        match self {
            Feed::Connecting => "Connecting…".into(),
            Feed::Live => "Live".into(),
            Feed::Paused => "Paused".into(),
            Feed::Waiting(why) => format!("Waiting: {why}"),
            Feed::Ended(why) => format!("Ended: {why}"),
        }
    }

    fn tone(&self) -> &'static str {
        match self {
            Feed::Live => "bg-emerald-100 text-emerald-800",
            Feed::Waiting(_) => "bg-amber-100 text-amber-900",
            _ => "bg-slate-100 text-slate-700",
        }
    }
}

/// Appends `data`, keeping the last [`KEEP_BYTES`] from a line's start.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn append(text: &mut String, data: &str) {
    text.push_str(data);
    if text.len() > KEEP_BYTES {
        let mut cut = text.len() - KEEP_BYTES;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        let cut = text[cut..].find('\n').map_or(cut, |n| cut + n + 1);
        text.drain(..cut);
    }
}

#[component]
pub fn RentalLogs(rental_id: i64) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let feed = RwSignal::new(Feed::Connecting);
    let paused = RwSignal::new(false);
    let output = NodeRef::<leptos::html::Pre>::new();
    #[cfg(feature = "hydrate")]
    follow(rental_id, text, feed, paused, output);
    let download = format!("/api/v1/rentals/{rental_id}/logs?download=true");
    view! {
        <section class="card space-y-3" aria-labelledby="logs">
            <div class="flex flex-wrap items-center justify-between gap-3">
                <div class="flex items-center gap-3">
                    <h2 id="logs" class="text-lg font-semibold text-slate-900">"Logs"</h2>
                    <span class=move || format!("rounded-full px-2 py-0.5 text-xs font-medium {}", feed.with(Feed::tone))
                        data-testid="logs-state" role="status">{move || feed.with(Feed::label)}</span>
                </div>
                <div class="flex gap-2">
                    <button type="button" class="btn-secondary" data-testid="logs-pause"
                        on:click=move |_| paused.update(|p| *p = !*p)>
                        {move || if paused.get() { "Resume" } else { "Pause" }}
                    </button>
                    <a class="btn-secondary" href=download download=format!("rental-{rental_id}.log")>"Download"</a>
                </div>
            </div>
            <pre node_ref=output data-testid="rental-logs" tabindex="0" aria-label="Workload output"
                class="h-72 overflow-auto whitespace-pre-wrap break-all rounded-lg bg-slate-950 p-3 font-mono text-xs leading-5 text-slate-100">
                {move || {
                    let t = text.get();
                    if t.is_empty() { "No output yet.".to_owned() } else { t }
                }}
            </pre>
        </section>
    }
}

#[cfg(feature = "hydrate")]
fn follow(
    rental_id: i64,
    text: RwSignal<String>,
    feed: RwSignal<Feed>,
    paused: RwSignal<bool>,
    output: NodeRef<leptos::html::Pre>,
) {
    use cardpool_domain::rentals::LogEvent;
    use send_wrapper::SendWrapper;
    use wasm_bindgen::{JsCast, closure::Closure};

    let offset = StoredValue::new(None::<u64>);
    let current = StoredValue::new_local(None::<web_sys::EventSource>);
    let close = move || {
        if let Some(source) = current.try_update_value(Option::take).flatten() {
            source.close();
        }
    };
    let open = move || {
        let url = match offset.get_value() {
            Some(at) => format!("/api/v1/rentals/{rental_id}/logs?follow=true&offset={at}"),
            None => format!("/api/v1/rentals/{rental_id}/logs?follow=true"),
        };
        let Ok(source) = web_sys::EventSource::new(&url) else { return };
        let on_message = {
            let source = SendWrapper::new(source.clone());
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
                let Some(json) = event.data().as_string() else { return };
                match serde_json::from_str::<LogEvent>(&json) {
                    Ok(LogEvent::Chunk(chunk)) => {
                        offset.set_value(Some(chunk.end));
                        feed.set(Feed::Live);
                        text.update(|t| append(t, &chunk.data));
                        // Keep the newest line in view while following.
                        if let Some(pre) = output.get_untracked() {
                            request_animation_frame(move || pre.set_scroll_top(pre.scroll_height()));
                        }
                    }
                    Ok(LogEvent::Waiting { reason }) => feed.set(Feed::Waiting(reason)),
                    Ok(LogEvent::End { reason }) => {
                        feed.set(Feed::Ended(reason));
                        source.close();
                    }
                    Err(_) => {}
                }
            })
        };
        let on_open = Closure::<dyn FnMut()>::new(move || {
            if feed.with_untracked(|f| matches!(f, Feed::Connecting | Feed::Waiting(_))) {
                feed.set(Feed::Live);
            }
        });
        source.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        on_message.forget();
        on_open.forget();
        current.set_value(Some(source));
    };
    Effect::new(move || {
        if paused.get() {
            close();
            if !feed.with_untracked(|f| matches!(f, Feed::Ended(_))) {
                feed.set(Feed::Paused);
            }
        } else if !feed.with_untracked(|f| matches!(f, Feed::Ended(_))) {
            close();
            feed.set(Feed::Connecting);
            open();
        }
    });
    on_cleanup(close);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_keeps_the_newest_output_from_a_lines_start() {
        let mut text = String::new();
        let line = format!("{}\n", "x".repeat(1023));
        for _ in 0..300 {
            append(&mut text, &line);
        }
        assert!(text.len() <= KEEP_BYTES);
        assert!(text.len() > KEEP_BYTES - 1024);
        assert!(text.starts_with('x') && text.ends_with('\n'));
        append(&mut text, "é\n");
        assert!(text.ends_with("é\n"));
    }
}
