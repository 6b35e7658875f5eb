//! `LimitService`: counts each request on one limit before the service it
//! wraps sees it, and answers for it when the limit refuses.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response};
use axum::BoxError;
use pin_project_lite::pin_project;
use tower_service::Service;

use super::config::{Answer, LayerConfig};
use super::extract::{KeyExtractor, NeedsParts};
use super::fields::Values;
use super::key::Key;

/// The service a [`LimitLayer`](super::LimitLayer) puts in front of `S`.
#[derive(Clone, Debug)]
pub struct LimitService<S, K> {
    inner: S,
    layer: Arc<LayerConfig<K>>,
}

impl<S, K> LimitService<S, K> {
    pub(super) fn new(inner: S, layer: Arc<LayerConfig<K>>) -> Self {
        LimitService { inner, layer }
    }
}

/// A boxed answer, for a store that answers only through a future.
type Boxed<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

pin_project! {
    /// The future of a [`LimitService`]'s answer: the wrapped service's
    /// future `F`, an answer made without it, or (on a store that answers
    /// through a future of its own) a boxed one.
    pub struct LimitFuture<F, E> {
        #[pin]
        state: State<F, E>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, E> {
        /// Refused (or failed) at once.
        Answered { response: Option<Response<Body>> },
        /// Passed to the wrapped service; the fields go on its answer.
        /// Boxed: 80 bytes held inline were moved with the future on every
        /// request, most of which carry none.
        Inner { #[pin] future: F, fields: Option<Box<Values>> },
        /// Counted by a store that answers through a future.
        Boxed { future: Boxed<E> },
    }
}

impl<F, E> LimitFuture<F, E> {
    fn answered(response: Response<Body>) -> Self {
        LimitFuture { state: State::Answered { response: Some(response) } }
    }

    fn inner(future: F, fields: Option<Box<Values>>) -> Self {
        LimitFuture { state: State::Inner { future, fields } }
    }
}

impl<F, E, R> Future for LimitFuture<F, E>
where
    F: Future<Output = Result<Response<R>, E>>,
    R: HttpBody<Data = Bytes> + Send + 'static,
    R::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Answered { response } => {
                Poll::Ready(Ok(response.take().expect("a LimitFuture polled after it answered")))
            }
            StateProj::Inner { future, fields } => {
                let mut response = ready!(future.poll(cx))?.map(Body::new);
                if let Some(fields) = fields.take() {
                    fields.write_to(response.headers_mut());
                }
                Poll::Ready(Ok(response))
            }
            StateProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}

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
    type Future = LimitFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let layer = &*self.layer;
        let key = match layer.extractor.key_in_place(request.headers(), request.extensions()) {
            Ok(key) => key,
            // Only for an extractor that reads more of the head: take the
            // request apart to lend it, then put it back together.
            Err(NeedsParts) => {
                let (head, body) = request.into_parts();
                let key = layer.extractor.extract(&head);
                request = Request::from_parts(head, body);
                key
            }
        };
        let counted = match key {
            Some(key) => match layer.count_now(&key) {
                Some(counted) => Some(counted),
                // The store answers through a future: count in a boxed one.
                None => return LimitFuture { state: State::Boxed { future: self.count_later(key, request) } },
            },
            None => None,
        };
        match layer.answer(counted) {
            Answer::Pass(fields) => LimitFuture::inner(self.inner.call(request), fields),
            Answer::Refuse(response) => LimitFuture::answered(response),
        }
    }
}

impl<S, K> LimitService<S, K> {
    /// The answer to `request`, counted on a store that answers through a future.
    fn count_later<B, R>(&mut self, key: Key, request: Request<B>) -> Boxed<S::Error>
    where
        S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
        S::Future: Send,
        S::Error: Send + 'static,
        K: Send + Sync + 'static,
        B: Send + 'static,
        R: HttpBody<Data = Bytes> + Send + 'static,
        R::Error: Into<BoxError>,
    {
        // The clone that was made ready is the one that serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        // An address counts as its client's network, as the count here and
        // now takes it.
        let key = key.ip().map_or(key, |ip| Key::address(layer.handle.client_network(ip)));
        Box::pin(async move {
            let counted = layer.handle.attempt(&[(&layer.part, key.as_str())], 1).await;
            match layer.answer(Some(counted)) {
                Answer::Pass(fields) => LimitFuture::inner(inner.call(request), fields).await,
                Answer::Refuse(response) => Ok(response),
            }
        })
    }
}
