//! LIST pages fetched one ahead.
//!
//! kube's watcher asks for a LIST page only after it has received and decoded the one before, so
//! the API server's encoding of a page and the host's reading of the previous one never overlap.
//! [`Prefetch`] sits in the informer's client (see [`super::guard::guarded_client`]): when a page
//! arrives with a continue token, it sends the request for the next page at once, in the
//! background, and hands that response over when the watcher asks for exactly that page. At most
//! one page is held ahead per informer.
//!
//! The next page is the same request (method, headers, path, every parameter) with `continue`
//! set to the token the server just gave, so its answer is the one the watcher would have got by
//! asking itself: the token pins the list's resourceVersion. Only a successful answer is handed
//! over; a failed fetch ahead (a transport error, any non-2xx status) is dropped and the watcher's
//! own request goes to the server then, so errors and their backoff are as without a fetch ahead.
//! A request for any other page drops what is held.
//!
//! A page is fetched by the caller's `fetch` and decoded by its `decode` (the guard's: a protobuf
//! page turned into JSON). The next page is asked for between the two, so that it is on its way
//! while this one is decoded and taken apart by the watcher. Its continue token is read from the
//! protobuf `ListMeta` ([`wasmformer_protobuf::continue_token`]), or from the head of the JSON: the
//! server writes a list's `metadata` before its `items` (Go's field order; the dev cluster keeps
//! it), so no scan of the items is needed, and a body that does not start that way is simply not
//! fetched ahead.

use std::future::Future;
use std::sync::Mutex;

use bytes::Bytes;
use kube::client::Body;
use tokio::task::JoinHandle;

use super::guard::is_protobuf;

/// A response whose body has been read to its end.
pub(crate) type Page = http::Response<Bytes>;

/// One informer's page fetched ahead, if any.
#[derive(Debug, Default)]
pub(crate) struct Prefetch {
    ahead: Mutex<Option<Ahead>>,
}

#[derive(Debug)]
struct Ahead {
    page: PageKey,
    task: JoinHandle<Result<Page, kube::Error>>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A LIST page: its path, its parameters but `continue` (sorted), and `continue`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PageKey {
    path: String,
    params: Vec<(String, String)>,
    token: Option<String>,
}

impl PageKey {
    /// The page `request` asks for, if it is a paged LIST (a GET with `limit`, not a watch).
    fn of<B>(request: &http::Request<B>) -> Option<Self> {
        if request.method() != http::Method::GET {
            return None;
        }
        let mut params = Vec::new();
        let mut token = None;
        for (name, value) in form_urlencoded::parse(request.uri().query()?.as_bytes()) {
            match &*name {
                "watch" if value == "true" || value == "1" => return None,
                "continue" => token = Some(value.into_owned()),
                _ => params.push((name.into_owned(), value.into_owned())),
            }
        }
        if !params.iter().any(|(name, _)| name == "limit") {
            return None;
        }
        params.sort();
        Some(Self {
            path: request.uri().path().to_owned(),
            params,
            token,
        })
    }

    /// The page after this one, whose continue token is `token`.
    fn next(&self, token: String) -> Self {
        Self {
            token: Some(token),
            ..self.clone()
        }
    }
}

impl Prefetch {
    /// Answers `request`: a paged LIST from the page fetched ahead when it is that page, from
    /// `fetch` otherwise; then, if the answer names a next page, sends for it and `decode`s this
    /// one meanwhile. Any other request is fetched and decoded as it is.
    pub(crate) async fn page<F, Fut>(
        &self,
        request: http::Request<Body>,
        fetch: F,
        decode: impl FnOnce(Page) -> Result<Page, kube::Error>,
    ) -> Result<Page, kube::Error>
    where
        F: Fn(http::Request<Body>) -> Fut,
        Fut: Future<Output = Result<Page, kube::Error>> + Send + 'static,
    {
        let Some(key) = PageKey::of(&request) else {
            return decode(fetch(request).await?);
        };
        let template = Template::of(&request);
        let ahead = self.ahead.lock().expect("prefetch lock poisoned").take();
        let held = match ahead {
            Some(mut ahead) if ahead.page == key => match (&mut ahead.task).await {
                Ok(Ok(page)) if page.status().is_success() => Some(page),
                _ => None,
            },
            // Not this page: dropped (and its fetch stopped).
            _ => None,
        };
        let page = match held {
            Some(page) => page,
            None => fetch(request).await?,
        };
        if page.status().is_success()
            && let Some(token) = continue_token(&page)
        {
            let next = key.next(token);
            let request = template.request(&next).map_err(kube::Error::HttpError)?;
            let task = tokio::spawn(fetch(request));
            *self.ahead.lock().expect("prefetch lock poisoned") = Some(Ahead { page: next, task });
            // The new task waits in this worker's next-task slot, which the other worker cannot
            // take: yield once, so that the request is sent now, not after this page is decoded.
            tokio::task::yield_now().await;
        }
        decode(page)
    }
}

/// What a page's request is made of but its URI's query.
struct Template {
    method: http::Method,
    version: http::Version,
    headers: http::HeaderMap,
    scheme: Option<http::uri::Scheme>,
    authority: Option<http::uri::Authority>,
}

impl Template {
    fn of<B>(request: &http::Request<B>) -> Self {
        Self {
            method: request.method().clone(),
            version: request.version(),
            headers: request.headers().clone(),
            scheme: request.uri().scheme().cloned(),
            authority: request.uri().authority().cloned(),
        }
    }

    /// The bodiless request for `page`.
    fn request(&self, page: &PageKey) -> Result<http::Request<Body>, http::Error> {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.extend_pairs(&page.params);
        if let Some(token) = &page.token {
            query.append_pair("continue", token);
        }
        let mut uri =
            http::Uri::builder().path_and_query(format!("{}?{}", page.path, query.finish()));
        if let Some(scheme) = &self.scheme {
            uri = uri.scheme(scheme.clone());
        }
        if let Some(authority) = &self.authority {
            uri = uri.authority(authority.clone());
        }
        let mut request = http::Request::builder()
            .method(self.method.clone())
            .version(self.version)
            .uri(uri.build()?)
            .body(Body::empty())?;
        *request.headers_mut() = self.headers.clone();
        Ok(request)
    }
}

/// The continue token of a LIST page, in protobuf or JSON; `None` on the last page.
fn continue_token(page: &Page) -> Option<String> {
    match is_protobuf(page.headers()) {
        true => wasmformer_protobuf::continue_token(page.body()),
        false => json_continue_token(page.body()),
    }
}

/// The continue token of the JSON list `body`, read from its `metadata` when that comes before its
/// `items`; `None` when there is none (the last page) or the body does not start that way.
fn json_continue_token(body: &[u8]) -> Option<String> {
    /// How far into the body `metadata` is looked for (after `kind` and `apiVersion`).
    const HEAD: usize = 4 << 10;
    const METADATA: &[u8] = br#""metadata":"#;
    let head = &body[..body.len().min(HEAD)];
    let start = find(head, METADATA)? + METADATA.len();
    if find(&head[..start], br#""items":"#).is_some() {
        return None;
    }
    // A list's metadata holds only strings and numbers: it ends at the first `}`.
    let end = start + find(&body[start..], b"}")? + 1;
    #[derive(serde::Deserialize)]
    struct ListMeta {
        #[serde(rename = "continue")]
        token: Option<String>,
    }
    let meta: ListMeta = serde_json::from_slice(&body[start..end]).ok()?;
    meta.token.filter(|token| !token.is_empty())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
#[path = "prefetch_tests.rs"]
mod tests;
