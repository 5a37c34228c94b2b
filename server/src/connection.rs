//! # What the accept loop holds a connection to
//!
//! hyper itself bounds the header section (`431` above [`Limits::max_header_bytes`], or above
//! 100 header lines) and the time to send it ([`Limits::header_read_timeout`]: counted from when
//! the connection is ready for a request, so it also ends a connection that sits idle that long).
//! This module adds what hyper's HTTP/1 connection does not have:
//!
//! - an idle keep-alive timeout: a connection with no request in flight, no write waiting on
//!   the socket, and no byte read or written for [`Limits::keep_alive_timeout`] is closed. A
//!   request is in flight from its head until hyper has taken its answer's last frame (or
//!   dropped it); hyper then writes what it took, and while the socket refuses those bytes the
//!   write waits, so a slow answer, a client pausing mid-answer, or a handler waiting on the
//!   database never counts as idle (a client that stops reading meets the send timeout).
//! - a send timeout: a write of an answer that the socket takes not one byte of for
//!   [`Limits::send_timeout`] fails, and the connection is reset, which drops the answer's body
//!   and with it any room it holds in the memory budget (a download's). The timer starts when
//!   the socket refuses a write and stops when it takes a byte, so a handler slow to answer never
//!   starts it, and a client that reads slowly but steadily never lets it run out. The kernel
//!   wakes a writer only once a third of its send buffer is free, which a slow reader may take
//!   longer than the timeout to free (the buffer grows to megabytes); so when the timer runs out
//!   the socket is asked directly, outside tokio, and any room it has counts as progress. Room
//!   the kernel adds to the buffer meanwhile counts too, so a client that reads nothing is cut
//!   after one to two timeouts. One `WARN` line says so, naming the client and the timeout.
//! - the cap on open connections ([`Limits::max_connections`]): at the cap the loop stops
//!   accepting, so new connections wait in the listen backlog until one closes, and says so in
//!   one log line each time the cap is reached.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http_body_util::BodyExt;
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// The limits of one server's connections (see [`crate::Config`] for their defaults).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    pub send_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_connections: usize,
}

impl Limits {
    /// The HTTP/1 connection builder with these limits.
    pub fn builder(&self) -> hyper::server::conn::http1::Builder {
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            // A header section larger than this is answered 431 once read whole; the read buffer
            // is bounded by it too, so a section that never ends is answered 431 as soon as it
            // fills the buffer, rather than held in memory (hyper's floor is 8 KiB).
            .max_header_size(self.max_header_bytes)
            .max_buf_size(self.max_header_bytes.max(8192));
        builder
    }
}

/// When a connection last moved a byte, how many of its requests are in flight, and whether a
/// write waits on its socket.
#[derive(Debug)]
pub(crate) struct Activity {
    opened: Instant,
    /// Milliseconds after `opened`.
    last: AtomicU64,
    in_flight: AtomicUsize,
    /// The socket refused the last write (its bytes are still hyper's to send): set when a
    /// write is pending, cleared when the socket takes a byte.
    writing: AtomicBool,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            opened: Instant::now(),
            last: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            writing: AtomicBool::new(false),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.opened + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }

    /// A request has begun; it is in flight until the guard is dropped.
    pub fn begin(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.touch();
        InFlight(self.clone())
    }

    /// Resolves once the connection has been idle for `timeout`: nothing in flight, no write
    /// waiting on the socket, no byte moved.
    pub async fn idle_for(&self, timeout: Duration) {
        loop {
            let due = self.last() + timeout;
            if Instant::now() >= due
                && self.in_flight.load(Ordering::SeqCst) == 0
                && !self.writing.load(Ordering::SeqCst)
            {
                return;
            }
            // Busy past the deadline: look again a timeout later (the end of a request touches).
            tokio::time::sleep_until(due.max(Instant::now() + timeout / 4)).await;
        }
    }
}

/// One request in flight on its connection.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InFlight {
    /// The answer, with this guard kept until hyper has taken its body's last frame or dropped
    /// it (the bytes it has yet to write are the socket's pending write, see [`Activity`]).
    pub fn until_written(self, response: Response) -> Response {
        response.map(|body| {
            Body::new(body.map_frame(move |frame| {
                let _in_flight = &self;
                frame
            }))
        })
    }
}

/// A connection's socket: notes every byte it moves in its connection's [`Activity`], and
/// fails a write that the socket has taken nothing of for the send timeout.
#[derive(Debug)]
pub(crate) struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
    send_timeout: Duration,
    /// When a write the socket takes nothing of gives up: set when the socket refuses one,
    /// cleared when it takes a byte.
    stalled: Option<Pin<Box<Sleep>>>,
    /// The socket took the last write outside tokio, which still thinks it full: the next
    /// write is tried outside too, until the socket refuses one.
    direct: bool,
    /// The send timeout has passed: every write fails.
    timed_out: bool,
}

/// The flags of a `send` made outside tokio: no `SIGPIPE` for a client gone, as tokio's own
/// writes.
#[cfg(any(target_os = "linux", target_os = "android"))]
const SEND_FLAGS: std::ffi::c_int = libc::MSG_NOSIGNAL;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const SEND_FLAGS: std::ffi::c_int = 0;

impl Watched {
    pub fn new(inner: TcpStream, activity: Arc<Activity>, send_timeout: Duration) -> Watched {
        Watched {
            inner,
            activity,
            send_timeout,
            stalled: None,
            direct: false,
            timed_out: false,
        }
    }

    /// A write: `write` through tokio, or `send_now` on the socket itself when tokio's idea of
    /// it may be stale (see [`Watched::direct`]); failed once the socket has taken nothing for
    /// the send timeout.
    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<usize>>,
        send_now: impl FnOnce(&SockRef<'_>) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        if self.timed_out {
            return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
        }
        match write(Pin::new(&mut self.inner), cx) {
            Poll::Ready(Ok(n)) if n > 0 => {
                self.direct = false;
                return Poll::Ready(Ok(self.sent(n)));
            }
            Poll::Pending => {}
            other => return other,
        }
        let due = match &mut self.stalled {
            Some(stalled) => stalled.as_mut().poll(cx).is_ready(),
            None => false,
        };
        // The kernel wakes a writer only once a third of its send buffer is free (megabytes on
        // loopback): a client that reads slowly but steadily may free less than that within a
        // send timeout. So at the deadline the socket is asked directly, and takes what room
        // there is; tokio, never told, says full until the socket refuses a write again.
        if self.direct || due {
            match send_now(&SockRef::from(&self.inner)) {
                Ok(n) if n > 0 => {
                    self.direct = true;
                    return Poll::Ready(Ok(self.sent(n)));
                }
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Poll::Ready(Err(e)),
                _ => {}
            }
        }
        self.direct = false;
        if due {
            return Poll::Ready(Err(self.time_out()));
        }
        self.activity.writing.store(true, Ordering::SeqCst);
        if self.stalled.is_none() {
            let mut stalled = Box::pin(tokio::time::sleep(self.send_timeout));
            // Polled once so that it wakes this connection when it is due.
            if stalled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(self.time_out()));
            }
            self.stalled = Some(stalled);
        }
        Poll::Pending
    }

    /// `n` bytes taken: the connection is active, and a stall over.
    fn sent(&mut self, n: usize) -> usize {
        self.activity.touch();
        self.activity.writing.store(false, Ordering::SeqCst);
        self.stalled = None;
        n
    }

    /// The send timeout has passed: this write, and every later one, fails.
    fn time_out(&mut self) -> io::Error {
        self.timed_out = true;
        tracing::warn!(
            peer = ?self.inner.peer_addr().ok(),
            "send timeout: the socket took no byte of an answer for {}; connection closed \
             (--send-timeout)",
            humantime::format_duration(self.send_timeout)
        );
        // A reset: the answer cannot be finished, so the kernel need not keep sending it.
        let _ = self.inner.set_zero_linger();
        io::ErrorKind::TimedOut.into()
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(
            cx,
            |inner, cx| inner.poll_write(cx, buf),
            |socket| socket.send_with_flags(buf, SEND_FLAGS),
        )
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(
            cx,
            |inner, cx| inner.poll_write_vectored(cx, bufs),
            |socket| socket.send_vectored_with_flags(bufs, SEND_FLAGS),
        )
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Permits for open connections; says once each time the cap is reached.
#[derive(Debug)]
pub(crate) struct Slots {
    permits: Arc<tokio::sync::Semaphore>,
    max: usize,
}

impl Slots {
    pub fn new(max: usize) -> Slots {
        Slots {
            permits: Arc::new(tokio::sync::Semaphore::new(max)),
            max,
        }
    }

    /// A slot for the next connection, waiting (without accepting) while all are taken.
    pub async fn take(&self) -> tokio::sync::OwnedSemaphorePermit {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return permit;
        }
        tracing::warn!(
            max_connections = self.max,
            "connection limit reached: {} connections open; new connections wait in the listen backlog until one closes (--max-connections)",
            self.max
        );
        match self.permits.clone().acquire_owned().await {
            Ok(permit) => permit,
            // The semaphore is never closed.
            Err(_) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_write_waiting_on_the_socket_is_not_idle() {
        // The keep-alive timer cut an answer that hyper had taken whole and the socket had not:
        // nothing in flight any more, and megabytes still to send to a client that paused.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let activity = Activity::new();
        let mut watched = Watched::new(server, activity.clone(), Duration::from_secs(600));
        const ANSWER: usize = 32 << 20;
        let writer = tokio::spawn(async move {
            watched.write_all(&vec![7u8; ANSWER]).await?;
            watched.flush().await
        });
        let keep_alive = Duration::from_millis(200);
        // The client reads nothing for five keep-alive timeouts: not idle.
        let idle = tokio::time::timeout(keep_alive * 5, activity.idle_for(keep_alive)).await;
        assert!(idle.is_err(), "idle while the answer waited on the socket");
        let mut got = vec![0u8; ANSWER];
        client.read_exact(&mut got).await.unwrap();
        writer.await.unwrap().unwrap();
        // Written out: idle a timeout later (the bound only stops a hang).
        tokio::time::timeout(Duration::from_secs(60), activity.idle_for(keep_alive))
            .await
            .expect("idle once the answer is written");
    }
}
