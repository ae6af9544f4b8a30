//! A TCP proxy the test can cut: while cut, it drops every open connection and
//! every new one, as an unreachable Firestore would look to the service.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct TcpProxy {
    pub address: String,
    cut: Arc<AtomicBool>,
    cut_signal: watch::Sender<bool>,
}

impl TcpProxy {
    pub async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let (cut_signal, _) = watch::channel(false);
        let accept_cut = cut.clone();
        let signal = cut_signal.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if accept_cut.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let mut cut_now = signal.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_now.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Self {
            address,
            cut,
            cut_signal,
        }
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let _ = self.cut_signal.send(true);
    }

    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
        let _ = self.cut_signal.send(false);
    }
}
