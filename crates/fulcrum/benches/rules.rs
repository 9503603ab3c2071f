//! What the rule engine costs one request, without the rest of the request around it: the
//! routes of a config file's first service (`bench/rules` writes the files: one route, the 50
//! rules of its side-by-side run, and those 50 without actions) tried against wrk's request
//! (`GET /index.html` from 127.0.0.1), and the taken route's header actions applied, a million
//! times, five runs of it. Prints the least disturbed run's nanoseconds per request for each file given.
// A benchmark reads the clock itself.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::Instant;

use fulcrum::proxy::http::route::{Seen, first};
use fulcrum::proxy::http::rules::{Context, apply};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, Version};

const REQUESTS: u32 = 1_000_000;

fn main() {
    let files: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if files.is_empty() {
        eprintln!("usage: rules CONFIG.toml ... (bench/rules writes them)");
        std::process::exit(2);
    }
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("127.0.0.1:19141"));
    let client = "127.0.0.1".parse().expect("an address");
    let method = Method::GET;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let config = fulcrum::config::parse(&text, &file).unwrap_or_else(|d| panic!("{d}"));
        let routes = &config.services[0].routes;
        let seen = Seen { method: &method, path: "/index.html", query: None, host: Some("127.0.0.1"), headers: &headers, client, sni: None, version: Version::HTTP_11 };
        let context = Context {
            client: "127.0.0.1:40000".parse().expect("an address"),
            request_id: None,
            sni: None,
            host: None,
            authority: None,
            path: String::new(),
            query: None,
            matched_prefix: None,
            scheme: "http",
            server: None,
        };
        // A request's and a response's headers, as wrk and nginx send them: a set header replaces
        // its own value from the iteration before, so the maps grow no further.
        let mut request = headers.clone();
        request.insert("user-agent", HeaderValue::from_static("wrk"));
        let mut response = HeaderMap::new();
        for (k, v) in [("server", "nginx"), ("date", "Fri, 27 Nov 2026 01:00:00 GMT"), ("content-type", "text/html"), ("content-length", "62")] {
            response.insert(k, HeaderValue::from_static(v));
        }
        // The least disturbed of five runs: on a shared machine a run is only ever slowed.
        let mut best = f64::MAX;
        let mut taken = 0;
        for _ in 0..5 {
            let began = Instant::now();
            taken = 0;
            for _ in 0..REQUESTS {
                if let Some((k, route)) = first(black_box(routes), black_box(&seen)) {
                    taken += k;
                    if let Some(a) = &route.request_headers {
                        apply(a, &mut request, &context);
                    }
                    if let Some(a) = &route.response_headers {
                        apply(a, &mut response, &context);
                    }
                }
                black_box((&request, &response));
            }
            best = best.min(began.elapsed().as_nanos() as f64 / f64::from(REQUESTS));
        }
        let ns = best;
        println!("{file}: {} routes, route {} takes the request: {ns:.0} ns per request", routes.len(), taken / REQUESTS as usize);
    }
}
