//! The HTTP listener for scrapes: HTTP/1.1 (hyper), `GET /metrics` and nothing else.
//!
//! The endpoint has no authentication, so it gives an anonymous client little: a few
//! connections at once (more are closed unanswered), one request per connection, headers
//! of at most `MAX_HEADER_BYTES` that must arrive within `HEADER_TIMEOUT`, and the whole
//! exchange within `CONNECTION_TIMEOUT`. A request body is never read.

use super::Scraper;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

/// Connections served at once; a scraper needs one, a person with curl another.
const MAX_CONNECTIONS: usize = 8;

/// The request line and headers together, in bytes (Prometheus sends about 300).
const MAX_HEADER_BYTES: usize = 8 << 10;

/// Headers a request may have.
const MAX_HEADERS: usize = 32;

/// The headers must have arrived within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection is closed after this, answered or not: a client that does not take its
/// answer holds its place no longer.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// What the answer says it is: OpenMetrics text, which Prometheus asks for first.
const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds the listener (at start, so a wrong address stops the daemon with the key's name).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves scrapes until the task is dropped.
pub async fn serve(listener: TcpListener, scraper: Arc<Scraper>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!("metrics listener accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(%peer, "metrics connection refused: {MAX_CONNECTIONS} are being served");
            continue;
        };
        let scraper = scraper.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req| answer(req, scraper.clone()));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES)
                .max_headers(MAX_HEADERS)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
                Err(_) => debug!(%peer, "metrics connection timed out"),
                Ok(Err(e)) => debug!(%peer, "metrics connection ended with an error: {e}"),
                Ok(Ok(())) => {}
            }
        });
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{text}\n"))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn answer(
    req: Request<Incoming>,
    scraper: Arc<Scraper>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    if req.uri().path() != "/metrics" {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "not found: metrics are at /metrics",
        ));
    }
    if req.method() != Method::GET {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: use GET",
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET"));
        return Ok(r);
    }
    let scraped = tokio::task::spawn_blocking(move || scraper.scrape()).await;
    Ok(match scraped {
        Ok(Ok(text)) => {
            let mut r = Response::new(Full::new(Bytes::from(text)));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(CONTENT_TYPE_OPENMETRICS),
            );
            r
        }
        Ok(Err(e)) => {
            warn!("metrics scrape failed: {e}");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot read the store: {e}"),
            )
        }
        Err(e) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the scrape did not finish: {e}"),
        ),
    })
}
