//! The dashboard: plain HTML, CSS and JavaScript from `web/`, compiled into the binary so it
//! works with no network and no build step.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX: &str = include_str!("../../../../web/index.html");
const SCRIPT: &str = include_str!("../../../../web/app.js");
const STYLE: &str = include_str!("../../../../web/style.css");
/// uPlot 1.6.32 (MIT, `web/vendor/uPlot.LICENSE`): the Overview's live charts, 50 KB, vendored so
/// the page needs no network.
const UPLOT: &str = include_str!("../../../../web/vendor/uPlot.iife.min.js");
const UPLOT_STYLE: &str = include_str!("../../../../web/vendor/uPlot.min.css");

/// The dashboard's routes; they read no state, so they fit under any router's.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response() }))
        .route("/app.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response() }))
        .route("/style.css", get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response() }))
        .route("/vendor/uplot.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], UPLOT).into_response() }))
        .route("/vendor/uplot.css", get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], UPLOT_STYLE).into_response() }))
}
