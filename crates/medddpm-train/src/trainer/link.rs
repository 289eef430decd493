//! The replicas' meeting point when each runs in a process of its own: TCP connections
//! between the lead (rank 0) and every other replica (on the loopback interface when the lead
//! started them; at the address a cluster launcher named when it started them on several
//! machines), carrying what
//! [`super::exchange::Exchange`] carries between threads (readiness, losses, and the gradients
//! where no GPU collective averages them) plus the session's start.
//!
//! A star: each replica sends its value to the lead, which answers every replica with all of
//! them in rank order. A replica that fails sends its error instead; the lead then tells every
//! other replica to stop and keeps the message, so the run's error is the replica's own.
//! A connection that closes counts as such a failure (a process that crashed).

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use medddpm_kernels::Compute;

use super::exchange::Aborted;
use crate::cluster::ClusterPlace;

/// Frame tags.
const DATA: u8 = 0;
const ABORT: u8 = 1;

/// What a replica first says: this, the run's token, its rank.
const HELLO: &str = "medddpm-replica";

/// How long the lead waits for every replica process to connect, and a replica that a
/// cluster launcher started for its lead to listen.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(600);

/// [`CONNECT_TIMEOUT`], or the seconds `MEDDDPM_RDZV_TIMEOUT` gives (a cluster run whose
/// nodes start far apart, or a test that wants a wrong address named sooner).
pub(crate) fn rendezvous_timeout() -> Duration {
    let seconds = seconds_from_env("MEDDDPM_RDZV_TIMEOUT", CONNECT_TIMEOUT.as_secs_f64());
    match seconds {
        0.0 => CONNECT_TIMEOUT,
        s => Duration::from_secs_f64(s),
    }
}

/// Seconds from the environment variable `name`, else `default`: a value that is not a
/// number of seconds is said (through the log) and the default kept.
fn seconds_from_env(name: &str, default: f64) -> f64 {
    let Ok(text) = std::env::var(name) else {
        return default;
    };
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => s,
        _ => {
            log::warn!("{name}={text:?} is not a number of seconds: {default} s kept");
            default
        }
    }
}

/// Where a replica process finds its lead, and who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSpec {
    /// The replica's rank (1.. ; the lead is 0).
    pub rank: usize,
    /// Replicas in the run, the lead included.
    pub world: usize,
    /// The device index the replica trains on.
    pub device: usize,
    /// The lead's address (`127.0.0.1:PORT`).
    pub lead: String,
    /// A secret of this run that the replica presents, so that no other process can join.
    pub token: String,
    /// How the run computes (the lead's, resolved): a replica process gets it on its command
    /// line, and nowhere else.
    pub compute: Compute,
}

/// What the lead records for a replica whose connection ended without a message (its process
/// killed or crashed): the process's exit status, where known, says more.
pub(crate) const CONNECTION_LOST: &str = "its process ended or its connection closed";

/// One end of a connection, framed: a tag byte, a little-endian u64 length, the bytes.
struct Peer {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

impl Peer {
    fn new(stream: TcpStream) -> std::io::Result<Self> {
        stream.set_nodelay(true)?;
        Ok(Self {
            reader: BufReader::new(stream.try_clone()?),
            writer: BufWriter::new(stream),
        })
    }

    fn send(&mut self, tag: u8, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(&[tag])?;
        self.writer.write_all(&(bytes.len() as u64).to_le_bytes())?;
        self.writer.write_all(bytes)?;
        self.writer.flush()
    }

    fn receive(&mut self) -> std::io::Result<(u8, Vec<u8>)> {
        let mut tag = [0u8];
        self.reader.read_exact(&mut tag)?;
        let mut len = [0u8; 8];
        self.reader.read_exact(&mut len)?;
        let len = u64::from_le_bytes(len) as usize;
        let mut bytes = Vec::new();
        // Read in steps so that a corrupt length fails on the missing bytes, not the allocation.
        (&mut self.reader)
            .take(len as u64)
            .read_to_end(&mut bytes)?;
        if bytes.len() != len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok((tag[0], bytes))
    }
}

/// The listening lead, before its replicas have connected.
pub(crate) struct Rendezvous {
    listener: TcpListener,
    token: String,
    world: usize,
}

impl Rendezvous {
    /// Listens on a free loopback port for the `world - 1` replicas of a run.
    pub fn bind(world: usize) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        Ok(Self {
            listener,
            token: fresh_token(),
            world,
        })
    }

    /// Listens where a cluster launcher said rank 0 would (`place.rendezvous`) for the other
    /// ranks, which must present `token`: on the loopback interface when that address is a
    /// loopback one, else on every interface (a machine's own name often resolves to a
    /// loopback address on itself while the other machines reach it by another).
    pub fn bind_at(place: &ClusterPlace, token: &str) -> std::io::Result<Self> {
        let listener = if place.loopback() {
            TcpListener::bind(place.rendezvous.as_str())?
        } else {
            let port = place
                .rendezvous
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .ok_or_else(|| std::io::Error::other("the address has no port"))?;
            TcpListener::bind(("0.0.0.0", port))?
        };
        Ok(Self {
            listener,
            token: token.to_string(),
            world: place.world,
        })
    }

    /// What replica `rank` (on device `device`, computing as `compute`) needs to join.
    pub fn spec(
        &self,
        rank: usize,
        device: usize,
        compute: Compute,
    ) -> std::io::Result<ReplicaSpec> {
        Ok(ReplicaSpec {
            rank,
            world: self.world,
            device,
            lead: self.listener.local_addr()?.to_string(),
            token: self.token.clone(),
            compute,
        })
    }

    /// Waits until every replica has connected. `gone` is asked while waiting whether a
    /// replica already ended (with why): then, or after `timeout`, the wait fails.
    pub fn accept(
        self,
        timeout: Duration,
        gone: &mut dyn FnMut() -> Option<String>,
    ) -> Result<ProcessLink, String> {
        let start = Instant::now();
        let mut peers: Vec<Option<Peer>> = (1..self.world).map(|_| None).collect();
        self.listener
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        while peers.iter().any(Option::is_none) {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
                    // A stranger that connects and says nothing must not hang the run.
                    stream
                        .set_read_timeout(Some(Duration::from_secs(30)))
                        .map_err(|e| e.to_string())?;
                    let mut peer = Peer::new(stream).map_err(|e| e.to_string())?;
                    let Ok((DATA, hello)) = peer.receive() else {
                        continue;
                    };
                    let Some(rank) = self.check_hello(&hello) else {
                        continue;
                    };
                    if peers[rank - 1].is_some() {
                        return Err(format!("two processes joined as replica {rank}"));
                    }
                    peer.reader
                        .get_ref()
                        .set_read_timeout(meeting_timeout())
                        .map_err(|e| e.to_string())?;
                    peers[rank - 1] = Some(peer);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Some(why) = gone() {
                        return Err(why);
                    }
                    if start.elapsed() > timeout {
                        let missing: Vec<usize> =
                            (1..self.world).filter(|r| peers[r - 1].is_none()).collect();
                        return Err(format!(
                            "replicas {missing:?} did not connect within {} s",
                            timeout.as_secs()
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(ProcessLink {
            world: self.world,
            side: Side::Lead {
                peers: Mutex::new(peers.into_iter().map(|p| p.expect("all joined")).collect()),
                failure: Mutex::new(None),
            },
        })
    }

    /// The rank a well-formed hello of this run names.
    fn check_hello(&self, hello: &[u8]) -> Option<usize> {
        let text = std::str::from_utf8(hello).ok()?;
        let mut words = text.split(' ');
        if words.next()? != HELLO || words.next()? != self.token {
            return None;
        }
        let rank: usize = words.next()?.parse().ok()?;
        (1..self.world).contains(&rank).then_some(rank)
    }
}

/// Whether a failed connection may succeed later: nothing listens yet, or the lead's machine
/// is not up on the network yet.
fn retry_connect(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionReset | TimedOut | HostUnreachable | NetworkUnreachable
    )
}

/// How long a process waits at a meeting for the others (a rank that hangs, or whose machine
/// left the network without closing its connection, would otherwise hold the run for ever):
/// `MEDDDPM_STEP_TIMEOUT` seconds, default 1800 (far above a step, a checkpoint with its
/// samples, or a first step that compiles every kernel), `0` to wait for ever.
pub(crate) fn meeting_timeout() -> Option<Duration> {
    let seconds = seconds_from_env("MEDDDPM_STEP_TIMEOUT", 1800.0);
    (seconds > 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// Why a read from a replica failed, in the words the run's error uses.
fn read_failure(e: &std::io::Error) -> String {
    match e.kind() {
        // A killed process closes its end: no reason, only EOF.
        std::io::ErrorKind::UnexpectedEof => CONNECTION_LOST.to_string(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "it did not reach the run's next meeting within {} s (its process hangs, or its \
             machine left the network; MEDDDPM_STEP_TIMEOUT sets the wait)",
            meeting_timeout().map_or(0, |t| t.as_secs())
        ),
        _ => format!("{CONNECTION_LOST} ({e})"),
    }
}

/// A token no other run shares: the clock, the process id and std's random hasher keys.
fn fresh_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    for i in 0..2u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        h.write_u64(i);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

enum Side {
    Lead {
        /// Replica `r`'s connection at `r - 1`.
        peers: Mutex<Vec<Peer>>,
        /// The first replica that failed, and its message.
        failure: Mutex<Option<(usize, String)>>,
    },
    Replica {
        lead: Mutex<Peer>,
    },
}

/// A replica's connections to the others (the lead's to every replica, a replica's to the
/// lead).
pub(crate) struct ProcessLink {
    world: usize,
    side: Side,
}

impl ProcessLink {
    /// Joins the lead that `spec` names, trying again while nothing listens there yet (a
    /// cluster launcher starts every rank at once) until `patience` has passed.
    pub fn connect(spec: &ReplicaSpec, patience: Duration) -> std::io::Result<Self> {
        let start = Instant::now();
        let stream = loop {
            match TcpStream::connect(&spec.lead) {
                Ok(stream) => break stream,
                Err(e) if start.elapsed() < patience && retry_connect(&e) => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) if !patience.is_zero() && retry_connect(&e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("{e}, for {} s", patience.as_secs()),
                    ))
                }
                Err(e) => return Err(e),
            }
        };
        stream.set_read_timeout(meeting_timeout())?;
        let mut peer = Peer::new(stream)?;
        peer.send(
            DATA,
            format!("{HELLO} {} {}", spec.token, spec.rank).as_bytes(),
        )?;
        Ok(Self {
            world: spec.world,
            side: Side::Replica {
                lead: Mutex::new(peer),
            },
        })
    }

    /// Every replica's `bytes`, in rank order; every replica calls it the same number of
    /// times.
    pub fn all_gather(&self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>, Aborted> {
        match &self.side {
            Side::Lead { peers, failure } => {
                let mut peers = lock(peers);
                let mut all = vec![bytes];
                for (i, peer) in peers.iter_mut().enumerate() {
                    match peer.receive() {
                        Ok((DATA, b)) => all.push(b),
                        other => {
                            let why = match other {
                                Ok((_, message)) => String::from_utf8_lossy(&message).into_owned(),
                                Err(e) => read_failure(&e),
                            };
                            lock(failure).get_or_insert((i + 1, why));
                            stop_all(&mut peers);
                            return Err(Aborted);
                        }
                    }
                }
                let packed = pack(&all);
                for peer in peers.iter_mut() {
                    // A replica gone now fails its next gather; the others go on this round.
                    let _ = peer.send(DATA, &packed);
                }
                Ok(all)
            }
            Side::Replica { lead } => {
                let mut lead = lock(lead);
                lead.send(DATA, &bytes).map_err(|_| Aborted)?;
                match lead.receive() {
                    Ok((DATA, packed)) => unpack(&packed, self.world).ok_or(Aborted),
                    _ => Err(Aborted),
                }
            }
        }
    }

    /// The lead's `bytes` on every replica (each passes its own, which only the lead's
    /// replaces).
    pub fn broadcast(&self, bytes: Vec<u8>) -> Result<Vec<u8>, Aborted> {
        match &self.side {
            Side::Lead { peers, .. } => {
                let mut peers = lock(peers);
                for peer in peers.iter_mut() {
                    peer.send(DATA, &bytes).map_err(|_| Aborted)?;
                }
                Ok(bytes)
            }
            Side::Replica { lead } => match lock(lead).receive() {
                Ok((DATA, b)) => Ok(b),
                _ => Err(Aborted),
            },
        }
    }

    /// Gives up: a replica tells the lead why (`message`), the lead tells every replica to
    /// stop. Their next meeting fails.
    pub fn abort(&self, message: &str) {
        match &self.side {
            Side::Lead { peers, .. } => stop_all(&mut lock(peers)),
            Side::Replica { lead } => {
                let _ = lock(lead).send(ABORT, message.as_bytes());
            }
        }
    }

    /// The first replica that failed (its rank and message), as the lead learnt it.
    pub fn failure(&self) -> Option<(usize, String)> {
        match &self.side {
            Side::Lead { failure, .. } => lock(failure).clone(),
            Side::Replica { .. } => None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn stop_all(peers: &mut [Peer]) {
    for peer in peers {
        let _ = peer.send(ABORT, b"stopped by the lead");
    }
}

/// Values as (u64 length, bytes) in order.
fn pack(all: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(all.iter().map(|b| b.len() + 8).sum());
    for b in all {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    }
    out
}

fn unpack(mut packed: &[u8], world: usize) -> Option<Vec<Vec<u8>>> {
    let mut all = Vec::with_capacity(world);
    for _ in 0..world {
        let len = u64::from_le_bytes(packed.get(..8)?.try_into().ok()?) as usize;
        all.push(packed.get(8..8 + len)?.to_vec());
        packed = &packed[8 + len..];
    }
    packed.is_empty().then_some(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team(
        world: usize,
    ) -> (
        ProcessLink,
        Vec<std::thread::JoinHandle<(usize, ProcessLink)>>,
    ) {
        let rendezvous = Rendezvous::bind(world).unwrap();
        let handles = (1..world)
            .map(|rank| {
                let spec = rendezvous.spec(rank, rank, Compute::default()).unwrap();
                std::thread::spawn(move || {
                    (rank, ProcessLink::connect(&spec, Duration::ZERO).unwrap())
                })
            })
            .collect();
        let lead = rendezvous
            .accept(Duration::from_secs(10), &mut || None)
            .unwrap();
        (lead, handles)
    }

    #[test]
    fn every_replica_gets_every_value_in_rank_order() {
        let (lead, handles) = team(3);
        let replicas: Vec<_> = handles
            .into_iter()
            .map(|h| {
                let (rank, link) = h.join().unwrap();
                std::thread::spawn(move || {
                    (0..20u8)
                        .map(|round| link.all_gather(vec![round, rank as u8]).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for round in 0..20u8 {
            let all = lead.all_gather(vec![round, 0]).unwrap();
            assert_eq!(all, vec![vec![round, 0], vec![round, 1], vec![round, 2]]);
        }
        for h in replicas {
            for (round, all) in h.join().unwrap().into_iter().enumerate() {
                assert_eq!(all[2], vec![round as u8, 2]);
            }
        }
    }

    #[test]
    fn a_failing_replica_stops_the_others_with_its_message() {
        let (lead, handles) = team(3);
        let mut links: Vec<_> = handles.into_iter().map(|h| h.join().unwrap().1).collect();
        let two = links.pop().unwrap();
        let one = links.pop().unwrap();
        let waiting = std::thread::spawn(move || one.all_gather(vec![1]));
        two.abort("could not read case_003.nii.gz");
        assert_eq!(lead.all_gather(vec![0]), Err(Aborted));
        assert_eq!(waiting.join().unwrap(), Err(Aborted));
        assert_eq!(
            lead.failure(),
            Some((2, "could not read case_003.nii.gz".to_string()))
        );
    }

    #[test]
    fn a_replica_whose_process_ends_is_named() {
        let (lead, handles) = team(2);
        drop(
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>(),
        );
        assert_eq!(lead.all_gather(vec![0]), Err(Aborted));
        let (rank, why) = lead.failure().unwrap();
        assert_eq!(rank, 1);
        assert!(why.contains("ended"), "{why}");
    }

    #[test]
    fn strangers_and_wrong_tokens_are_not_replicas() {
        let rendezvous = Rendezvous::bind(2).unwrap();
        let mut wrong = rendezvous.spec(1, 1, Compute::default()).unwrap();
        wrong.token = "guess".into();
        let _stranger = ProcessLink::connect(&wrong, Duration::ZERO).unwrap();
        let err = rendezvous
            .accept(Duration::from_millis(300), &mut || None)
            .err()
            .unwrap();
        assert!(err.contains("did not connect"), "{err}");
        let rendezvous = Rendezvous::bind(2).unwrap();
        let err = rendezvous
            .accept(Duration::from_secs(10), &mut || {
                Some("replica 1 exited with status 1".into())
            })
            .err()
            .unwrap();
        assert_eq!(err, "replica 1 exited with status 1");
    }

    #[test]
    fn the_leads_broadcast_reaches_every_replica() {
        let (lead, handles) = team(3);
        let replicas: Vec<_> = handles
            .into_iter()
            .map(|h| std::thread::spawn(move || h.join().unwrap().1.broadcast(vec![9]).unwrap()))
            .collect();
        lead.broadcast(vec![1, 2, 3]).unwrap();
        for h in replicas {
            assert_eq!(h.join().unwrap(), vec![1, 2, 3]);
        }
    }
}
