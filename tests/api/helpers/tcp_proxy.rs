//! A TCP proxy the test puts between the service and the Firestore emulator, to
//! make the network between them misbehave on purpose. The service talks gRPC
//! over HTTP/2, so one or a few long-lived connections carry many requests at
//! once; every fault below therefore also acts on connections already open.
//!
//! - `cut`: Firestore is unreachable. Every open connection is dropped at once,
//!   and every new one is closed as soon as it arrives, until `restore`.
//! - `stall_answers(hold)`: Firestore answers stall while requests still pass
//!   (and writes land). Bytes from the emulator back to the service are held
//!   for `hold` before being passed on; bytes towards the emulator pass at once.
//!   `stop_stalling` holds no new bytes; bytes already held still arrive.
//! - `set_latency(each_way)`: a slow network. Every piece of data, in both
//!   directions, arrives `each_way` later. It adds up with a stall.
//! - `reset_connections`: the network drops the connections abruptly. Every
//!   open connection is aborted with a TCP reset on both sides (not a clean
//!   close); new connections are accepted as usual afterwards.
//! - `restore` clears every fault (cut, stall and latency).
//!
//! Bytes are never reordered or dropped by a delay: on each connection and in
//! each direction they arrive in the order they were sent.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};

/// How much is read from a socket at a time; each read is delayed as one chunk.
const CHUNK: usize = 16 * 1024;

pub struct TcpProxy {
    /// Where the service should connect (`127.0.0.1:port`) instead of the target.
    pub address: String,
    shared: Arc<Shared>,
    control: watch::Sender<Control>,
}

/// Settings read each time a chunk is read, so a change applies at once.
#[derive(Default)]
struct Shared {
    stall_nanos: AtomicU64,
    latency_nanos: AtomicU64,
    opened: AtomicUsize,
}

impl Shared {
    /// The delay for a chunk read now, going to the client (`answer`) or to the target.
    fn delay(&self, answer: bool) -> Duration {
        let mut nanos = self.latency_nanos.load(Ordering::SeqCst);
        if answer {
            nanos = nanos.saturating_add(self.stall_nanos.load(Ordering::SeqCst));
        }
        Duration::from_nanos(nanos)
    }
}

/// What open connections watch: a cut, or a reset (each reset bumps `resets`).
#[derive(Clone, Copy, Default)]
struct Control {
    cut: bool,
    resets: u64,
}

/// Why a connection ended.
enum End {
    /// Both sides closed cleanly.
    Closed,
    /// A read or write failed: the other side is reset too.
    Failed,
    Cut,
    Reset,
}

impl TcpProxy {
    pub async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let shared = Arc::new(Shared::default());
        let (control, _) = watch::channel(Control::default());
        let accept_shared = shared.clone();
        let accept_control = control.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let watching = accept_control.subscribe();
                let now = *watching.borrow();
                if now.cut {
                    drop(inbound);
                    continue;
                }
                accept_shared.opened.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(relay(
                    inbound,
                    target.clone(),
                    accept_shared.clone(),
                    watching,
                    now.resets,
                ));
            }
        });
        Self {
            address,
            shared,
            control,
        }
    }

    /// Drops every open connection and closes new ones at once, until `restore`.
    pub fn cut(&self) {
        self.control.send_modify(|control| control.cut = true);
    }

    /// Clears every fault: no cut, no stall, no latency.
    pub fn restore(&self) {
        self.shared.stall_nanos.store(0, Ordering::SeqCst);
        self.shared.latency_nanos.store(0, Ordering::SeqCst);
        self.control.send_modify(|control| control.cut = false);
    }

    /// Holds every chunk read from now on from the target back to the client
    /// for `hold`; chunks to the target pass at once. Open connections too.
    pub fn stall_answers(&self, hold: Duration) {
        self.shared.stall_nanos.store(nanos(hold), Ordering::SeqCst);
    }

    /// Holds no new chunk; chunks already held are still delivered, in order.
    pub fn stop_stalling(&self) {
        self.shared.stall_nanos.store(0, Ordering::SeqCst);
    }

    /// Delays every chunk read from now on, in both directions, by `each_way`
    /// (zero for none). Added to a stall for answers.
    pub fn set_latency(&self, each_way: Duration) {
        self.shared.latency_nanos.store(nanos(each_way), Ordering::SeqCst);
    }

    /// Aborts every open connection with a TCP reset on both sides; new
    /// connections are accepted as usual.
    pub fn reset_connections(&self) {
        self.control
            .send_modify(|control| control.resets = control.resets.wrapping_add(1));
    }

    /// How many connections the proxy has let through so far (not counting
    /// those closed at once while cut).
    pub fn connections_opened(&self) -> usize {
        self.shared.opened.load(Ordering::SeqCst)
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Carries one client connection to the target until it ends, is cut or is reset.
async fn relay(
    mut inbound: TcpStream,
    target: String,
    shared: Arc<Shared>,
    mut control: watch::Receiver<Control>,
    resets_at_accept: u64,
) {
    let Ok(mut outbound) = TcpStream::connect(&target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let end = {
        let (from_client, to_client) = inbound.split();
        let (from_target, to_target) = outbound.split();
        let both_ways = async {
            tokio::try_join!(
                forward(from_client, to_target, &shared, false),
                forward(from_target, to_client, &shared, true),
            )
        };
        tokio::select! {
            result = both_ways => match result {
                Ok(_) => End::Closed,
                Err(_) => End::Failed,
            },
            end = interrupted(&mut control, resets_at_accept) => end,
        }
    };
    if matches!(end, End::Reset | End::Failed) {
        // Zero linger: dropping the socket sends a RST instead of a FIN.
        let _ = inbound.set_zero_linger();
        let _ = outbound.set_zero_linger();
    }
    drop(inbound);
    drop(outbound);
}

/// Resolves once the proxy is cut or reset after this connection was accepted.
async fn interrupted(control: &mut watch::Receiver<Control>, resets_at_accept: u64) -> End {
    let cut = control
        .wait_for(|now| now.cut || now.resets != resets_at_accept)
        .await
        .map(|now| now.cut);
    match cut {
        Ok(true) => End::Cut,
        Ok(false) => End::Reset,
        // The proxy is gone (its sender dropped): nothing will interrupt any more.
        Err(_) => std::future::pending().await,
    }
}

/// One direction of a connection: a reader stamps each chunk with the time it
/// is due and queues it; a writer delivers the chunks in order, each no earlier
/// than its due time. At end of input the writer delivers what is queued, then
/// closes its side for writing. Returns on end of input or the first error.
async fn forward(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>, shared: &Shared, answer: bool) -> io::Result<()> {
    let (queue, mut held) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buffer = vec![0u8; CHUNK];
        loop {
            let read = from.read(&mut buffer).await?;
            if read == 0 {
                // Dropping `queue` tells the writer that nothing more comes.
                return Ok::<(), io::Error>(());
            }
            let now = Instant::now();
            let due = now
                .checked_add(shared.delay(answer))
                .unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
            if queue.send((due, buffer[..read].to_vec())).is_err() {
                return Ok(());
            }
        }
    };
    let write = async move {
        let mut previous = Instant::now();
        while let Some((due, bytes)) = held.recv().await {
            previous = previous.max(due);
            sleep_until(previous).await;
            to.write_all(&bytes).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(read, write).map(|_| ())
}
