//! The chaos run's faults apart from LINE's: SIGKILLs of the instances and a
//! misbehaving network between them and Firestore.

use super::Instances;
use crate::soak::Rng;
use crate::tcp_proxy::TcpProxy;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// A random instance is SIGKILLed every 60 to 120 s and started again 2 s later
/// (on its port, so the driver's addresses stay valid), until `stop`.
pub async fn kill_now_and_then(instances: Arc<Instances>, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let mut rng = Rng::new();
    let began = Instant::now();
    let mut kills = Vec::new();
    loop {
        let pause = Duration::from_secs(60 + rng.below(61) as u64);
        if sleep_unless_stopped(pause, &stop).await {
            return kills;
        }
        let slot = rng.below(instances.count());
        instances.kill(slot).await;
        kills.push(began.elapsed());
        println!("  {:>5.0} s: instance {slot} SIGKILLed", began.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_secs(2)).await;
        instances.restart(slot).await;
    }
}

/// What the network did to Firestore's connections.
#[derive(Debug, Default, Clone, Copy)]
pub struct NetworkFaults {
    pub stalled: Duration,
    pub reset: Duration,
    pub stalls: u32,
    pub resets: u32,
    pub total: Duration,
}

/// Time is cut into stretches of 3 to 15 s; each is faulty with probability
/// 1/5: either Firestore's answers stall (held 2 to 6 s while requests still
/// pass, so writes land and the service sees timeouts: outcomes it does not
/// know), or every connection is reset at the stretch's start and then every
/// second. Until `stop`; then the network is healthy again.
pub async fn disturb_firestore(proxy: Arc<TcpProxy>, stop: Arc<AtomicBool>) -> NetworkFaults {
    let mut rng = Rng::new();
    let began = Instant::now();
    let mut faults = NetworkFaults::default();
    while !stop.load(Ordering::SeqCst) {
        let stretch = Duration::from_millis(3000 + rng.below(12_001) as u64);
        if rng.below(5) != 0 {
            if sleep_unless_stopped(stretch, &stop).await {
                break;
            }
            continue;
        }
        if rng.coin() {
            faults.stalls += 1;
            faults.stalled += stretch;
            proxy.stall_answers(Duration::from_millis(2000 + rng.below(4001) as u64));
            let stopped = sleep_unless_stopped(stretch, &stop).await;
            proxy.stop_stalling();
            if stopped {
                break;
            }
        } else {
            faults.resets += 1;
            faults.reset += stretch;
            let until = Instant::now() + stretch;
            while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                proxy.reset_connections();
                tokio::time::sleep(Duration::from_secs(1).min(until - Instant::now())).await;
            }
        }
    }
    proxy.restore();
    faults.total = began.elapsed();
    faults
}

/// Sleeps `pause` in small steps; true when `stop` was set meanwhile.
async fn sleep_unless_stopped(pause: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + pause;
    while Instant::now() < until {
        if stop.load(Ordering::SeqCst) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200).min(until - Instant::now())).await;
    }
    stop.load(Ordering::SeqCst)
}
