//! `LimitService`: counts each request on one limit before the service it
//! wraps sees it, and answers for it when the limit refuses.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response};
use axum::response::IntoResponse;
use axum::BoxError;
use tower_service::Service;

use super::extract::KeyExtractor;
use super::layer::LimitLayer;
use super::refusal::{MissingKey, Refusal};
use crate::ratelimit_fields::fields;
use crate::LimitError;

/// The service a [`LimitLayer`] puts in front of `S`.
#[derive(Clone, Debug)]
pub struct LimitService<S, K> {
    inner: S,
    layer: Arc<LimitLayer<K>>,
}

impl<S, K> LimitService<S, K> {
    pub(crate) fn new(inner: S, layer: Arc<LimitLayer<K>>) -> Self {
        LimitService { inner, layer }
    }
}

/// The future of a [`LimitService`]'s answer.
pub type LimitFuture<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

impl<S, K, B, R> Service<Request<B>> for LimitService<S, K>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    K: KeyExtractor,
    B: Send + 'static,
    R: HttpBody<Data = Bytes> + Send + 'static,
    R::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = LimitFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone that was made ready is the one that serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        let (head, body) = request.into_parts();
        let key = layer.extractor.extract(&head);
        let request = Request::from_parts(head, body);
        Box::pin(async move {
            let pass = |response: Response<R>| response.map(Body::new);
            let limit = layer.limit.as_str();
            let decision = match key {
                Some(key) => match layer.limits.attempt(limit, &[(&layer.part, &key)]).await {
                    Ok(decision) => Some(decision),
                    // A value the part can't take (not an address) is no key.
                    Err(LimitError::BadValue { .. }) => None,
                    Err(e) => return Ok(layer.refuse(Refusal::of_error(limit, &e))),
                },
                None => None,
            };
            let Some(decision) = decision else {
                return match layer.missing {
                    MissingKey::Pass => inner.call(request).await.map(pass),
                    MissingKey::Reject(status) => Ok(layer.refuse(Refusal::missing_key(limit, status, &layer.what))),
                };
            };
            let fields = fields(limit, 1, &decision);
            if let Some(refusal) = Refusal::of_decision(limit, 1, decision) {
                return Ok(layer.refuse(refusal));
            }
            let mut response = inner.call(request).await.map(pass)?;
            fields.write_to(response.headers_mut());
            Ok(response)
        })
    }
}

impl<K> LimitLayer<K> {
    fn refuse(&self, refusal: Refusal) -> Response<Body> {
        refusal.with_body(self.body.clone()).into_response()
    }
}
