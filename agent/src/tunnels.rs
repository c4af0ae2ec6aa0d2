//! SSH channels into rentals, relayed by the server over this agent's connection (see
//! `cardpool_protocol::tunnel`): a shell or command inside the rental's sandbox (with a
//! terminal when the client asked for one), its SFTP server, or a TCP connection made from
//! inside the rental's own network (`ssh -L`).
//!
//! What runs on a channel is exactly as contained as the workload: the runtime's
//! [`crate::runtime::Runtime::enter`] puts it in the sandbox's namespaces, cgroups and user,
//! without privileges. A forwarded port is dialled from a short-lived thread that has moved
//! into the sandbox's network namespace, so "localhost" is the rental's, never the host's.
//!
//! Each channel is one task. Output goes out in data frames as long as the server's window
//! allows; input is written to the process and acknowledged once written. A channel the
//! client abandons takes its processes with it; one whose process ended leaves what that
//! process started in the background running (`nohup train.py &` over SSH keeps training).

use crate::supervisor::Supervisor;
use cardpool_protocol::{
    AgentMessage, ChannelTarget, Terminal,
    tunnel::{CHANNEL_CHUNK, CHANNEL_WINDOW, MAX_CHANNELS, Stream, data_frame, parse_data_frame},
};
use std::{
    collections::HashMap,
    os::fd::{AsFd, OwnedFd},
    path::Path,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    sync::{Semaphore, mpsc},
};
use tokio_tungstenite::tungstenite::Message;

/// Frames for the agent's connection.
pub type Outbox = mpsc::UnboundedSender<Message>;

/// How long a forwarded port may take to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// After a terminal's shell exits, how long output still drains (a background process may
/// hold the terminal open forever).
const TERMINAL_DRAIN: Duration = Duration::from_millis(300);
/// Where Debian and others keep OpenSSH's SFTP server (the sandbox sees the host's `/usr`).
const SFTP_SERVERS: [&str; 4] = [
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/lib/ssh/sftp-server",
    "/usr/libexec/sftp-server",
];

enum Input {
    Data(Vec<u8>),
    Eof,
    Resize { cols: u16, rows: u16 },
}

struct Handle {
    input: mpsc::UnboundedSender<Input>,
    /// What the server's window still allows this channel to send.
    credit: Arc<Semaphore>,
}

/// The open channels of one agent connection; dropping it (the connection went) ends them.
pub struct Tunnels {
    supervisor: Supervisor,
    out: Outbox,
    channels: Arc<Mutex<HashMap<u64, Handle>>>,
}

fn say(out: &Outbox, message: AgentMessage) {
    if let Ok(text) = serde_json::to_string(&message) {
        let _ = out.send(Message::Text(text.into()));
    }
}

impl Tunnels {
    pub fn new(supervisor: Supervisor) -> (Tunnels, mpsc::UnboundedReceiver<Message>) {
        let (out, frames) = mpsc::unbounded_channel();
        (Tunnels { supervisor, out, channels: Arc::default() }, frames)
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Handle>> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens `channel` into the rental; answered with `ChannelOpened` or `ChannelRefused`.
    pub fn open(
        &self,
        channel: u64,
        rental_id: i64,
        target: ChannelTarget,
        terminal: Option<Terminal>,
        env: Vec<(String, String)>,
    ) {
        let (input_tx, input) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(CHANNEL_WINDOW as usize));
        {
            let mut channels = self.channels();
            if channels.len() >= MAX_CHANNELS || channels.contains_key(&channel) {
                let reason = format!("this host already carries {MAX_CHANNELS} channels");
                return say(&self.out, AgentMessage::ChannelRefused { channel, reason });
            }
            channels.insert(channel, Handle { input: input_tx, credit: credit.clone() });
        }
        let link = Link { channel, out: self.out.clone(), credit };
        let (supervisor, channels) = (self.supervisor.clone(), self.channels.clone());
        tokio::spawn(async move {
            let ran = match target {
                ChannelTarget::Tcp { host, port } => run_tcp(&supervisor, rental_id, &host, port, input, &link).await,
                target => run_process(&supervisor, rental_id, target, terminal, &env, input, &link).await,
            };
            if let Err(reason) = ran {
                say(&link.out, AgentMessage::ChannelRefused { channel, reason });
            }
            channels.lock().unwrap_or_else(|p| p.into_inner()).remove(&channel);
            say(&link.out, AgentMessage::ChannelClosed { channel });
        });
    }

    /// A binary frame from the server: bytes for a channel's stdin (or TCP stream).
    pub fn data(&self, frame: &[u8]) {
        if let Some((channel, Stream::Main, bytes)) = parse_data_frame(frame) {
            self.send(channel, Input::Data(bytes.to_vec()));
        }
    }

    pub fn window(&self, channel: u64, bytes: u64) {
        if let Some(handle) = self.channels().get(&channel) {
            let room = CHANNEL_WINDOW.saturating_sub(handle.credit.available_permits() as u64);
            handle.credit.add_permits(bytes.min(room) as usize);
        }
    }

    pub fn eof(&self, channel: u64) {
        self.send(channel, Input::Eof);
    }

    pub fn resize(&self, channel: u64, cols: u16, rows: u16) {
        self.send(channel, Input::Resize { cols, rows });
    }

    /// The client is gone: the channel's task ends and takes its processes with it.
    pub fn close(&self, channel: u64) {
        self.channels().remove(&channel);
    }

    fn send(&self, channel: u64, input: Input) {
        if let Some(handle) = self.channels().get(&channel) {
            let _ = handle.input.send(input);
        }
    }
}

/// One channel's way out.
struct Link {
    channel: u64,
    out: Outbox,
    credit: Arc<Semaphore>,
}

impl Link {
    fn say(&self, message: AgentMessage) {
        say(&self.out, message);
    }

    /// Sends what `reader` produces until it ends, never more than the window allows.
    async fn pump(&self, mut reader: impl AsyncRead + Unpin, stream: Stream) {
        let mut buf = vec![0u8; CHANNEL_CHUNK];
        loop {
            let n = match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let Ok(permits) = self.credit.acquire_many(n as u32).await else { return };
            permits.forget();
            if self.out.send(Message::Binary(data_frame(self.channel, stream, &buf[..n]).into())).is_err() {
                return;
            }
        }
    }
}

/// Kills a process group when dropped, unless disarmed (the process ended on its own).
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.filter(|p| *p > 0) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// A terminal: the master stays with the agent, the slave becomes the process's stdio.
/// Both are close-on-exec from the start, so no other process (another renter's!) inherits
/// them.
fn open_terminal(terminal: &Terminal) -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::{fs, pty};
    let master = pty::openpt(pty::OpenptFlags::RDWR | pty::OpenptFlags::NOCTTY | pty::OpenptFlags::CLOEXEC)?;
    pty::grantpt(&master)?;
    pty::unlockpt(&master)?;
    let name = pty::ptsname(&master, Vec::new())?;
    let slave =
        fs::open(name.as_c_str(), fs::OFlags::RDWR | fs::OFlags::NOCTTY | fs::OFlags::CLOEXEC, fs::Mode::empty())?;
    resize(&master, terminal.cols, terminal.rows);
    Ok((master, slave))
}

fn resize(master: impl AsFd, cols: u16, rows: u16) {
    let size = rustix::termios::Winsize {
        ws_row: rows.clamp(1, 1000),
        ws_col: cols.clamp(1, 1000),
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let _ = rustix::termios::tcsetwinsize(master, size);
}

/// What the client asked to run, as an argv inside the sandbox.
fn argv_for(target: &ChannelTarget) -> Result<Vec<String>, String> {
    let shell = if Path::new("/bin/bash").exists() { "/bin/bash" } else { "/bin/sh" };
    Ok(match target {
        ChannelTarget::Shell => vec![shell.into(), "-l".into()],
        ChannelTarget::Exec { command } => vec![shell.into(), "-c".into(), command.clone()],
        ChannelTarget::Sftp => {
            let server = SFTP_SERVERS.into_iter().find(|p| Path::new(p).exists()).ok_or(
                "this host has no SFTP server (Debian: apt-get install openssh-sftp-server); `scp -O` still works",
            )?;
            vec![server.into()]
        }
        ChannelTarget::Tcp { .. } => return Err("not a process".into()),
    })
}

/// Client variables a shell may take: the locale, as OpenSSH's default `AcceptEnv` does.
fn accepted(name: &str, value: &str) -> bool {
    (name == "LANG" || name.starts_with("LC_"))
        && name.len() <= 32
        && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        && value.len() <= 64
        && value.chars().all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c))
}

async fn run_process(
    supervisor: &Supervisor,
    rental_id: i64,
    target: ChannelTarget,
    terminal: Option<Terminal>,
    env: &[(String, String)],
    mut input: mpsc::UnboundedReceiver<Input>,
    link: &Link,
) -> Result<(), String> {
    let (runtime, dir, gpus) = supervisor.entry(rental_id)?;
    let argv = runtime.enter(rental_id, &dir, gpus, &argv_for(&target)?)?;
    let mut command = match terminal {
        // A session of its own with the terminal as its controlling one, as sshd gives.
        Some(_) => {
            let mut command = tokio::process::Command::new("/usr/bin/setsid");
            command.arg("--ctty").args(&argv);
            command
        }
        None => {
            let mut command = tokio::process::Command::new(&argv[0]);
            command.args(&argv[1..]).process_group(0);
            command
        }
    };
    command.env_clear();
    command.env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    command.env("HOME", "/workspace").env("USER", "renter").env("LOGNAME", "renter").env("LANG", "C.UTF-8");
    for (name, value) in env.iter().filter(|(n, v)| accepted(n, v)) {
        command.env(name, value);
    }
    let mut master = None;
    if let Some(terminal) = &terminal {
        let (control, slave) = open_terminal(terminal).map_err(|e| format!("cannot open a terminal: {e}"))?;
        let clone = |fd: &OwnedFd| fd.try_clone().map_err(|e| format!("cannot open a terminal: {e}"));
        command.stdin(Stdio::from(clone(&slave)?)).stdout(Stdio::from(clone(&slave)?)).stderr(Stdio::from(slave));
        let term = if terminal.term.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c)) {
            terminal.term.as_str()
        } else {
            "xterm"
        };
        command.env("TERM", term);
        master = Some(control);
    } else {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    command.kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
    // The terminal's slave lives only in the child now: its end reads as the output's end.
    drop(command);
    let mut group = GroupGuard(child.id().and_then(|p| i32::try_from(p).ok()));
    link.say(AgentMessage::ChannelOpened { channel: link.channel });

    let (mut stdin, outputs): (Option<Box<dyn AsyncWrite + Unpin + Send>>, _) = match &master {
        Some(master) => {
            let open = |fd: &OwnedFd| fd.try_clone().map(|fd| tokio::fs::File::from_std(std::fs::File::from(fd)));
            let (reader, writer) = (open(master).map_err(|e| e.to_string())?, open(master).map_err(|e| e.to_string())?);
            let pump = async move { link.pump(reader, Stream::Main).await };
            (Some(Box::new(writer) as _), futures_util::future::Either::Left(pump))
        }
        None => {
            let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
            let stdin = child.stdin.take().map(|s| Box::new(s) as _);
            let pumps = async move {
                let out = async {
                    if let Some(stdout) = stdout {
                        link.pump(stdout, Stream::Main).await;
                    }
                };
                let err = async {
                    if let Some(stderr) = stderr {
                        link.pump(stderr, Stream::Stderr).await;
                    }
                };
                tokio::join!(out, err);
            };
            (stdin, futures_util::future::Either::Right(pumps))
        }
    };
    tokio::pin!(outputs);
    let (mut exited, mut drained) = (None, false);
    let mut drain_deadline = None;
    while exited.is_none() || !drained {
        let deadline = async {
            match drain_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            received = input.recv() => match received {
                // The client went away (or the connection did): the guard ends the processes.
                None => return Ok(()),
                Some(Input::Data(bytes)) => {
                    if let Some(writer) = stdin.as_mut()
                        && (writer.write_all(&bytes).await.is_err() || writer.flush().await.is_err())
                    {
                        stdin = None;
                    }
                    link.say(AgentMessage::ChannelWindow { channel: link.channel, bytes: bytes.len() as u64 });
                }
                Some(Input::Eof) => {
                    if master.is_none() {
                        stdin = None;
                    }
                }
                Some(Input::Resize { cols, rows }) => {
                    if let Some(master) = &master {
                        resize(master, cols, rows);
                    }
                }
            },
            status = child.wait(), if exited.is_none() => {
                exited = Some(status.map_err(|e| e.to_string())?);
                group.0 = None;
                if master.is_some() {
                    drain_deadline = Some(tokio::time::Instant::now() + TERMINAL_DRAIN);
                }
            },
            () = &mut outputs, if !drained => drained = true,
            () = deadline, if !drained => drained = true,
        }
    }
    link.say(AgentMessage::ChannelEof { channel: link.channel });
    let status = exited.unwrap_or_default();
    use std::os::unix::process::ExitStatusExt;
    let signal = status
        .signal()
        .and_then(|s| nix::sys::signal::Signal::try_from(s).ok())
        .map(|s| s.as_str().trim_start_matches("SIG").to_owned());
    link.say(AgentMessage::ChannelExit { channel: link.channel, code: status.code(), signal });
    Ok(())
}

/// Dials `host:port` from inside the network namespace at `netns`, on a thread of its own
/// that ends right after (a thread's namespace is for life).
pub(crate) async fn connect_inside(netns: &Path, host: &str, port: u16) -> Result<tokio::net::TcpStream, String> {
    let (netns, host) = (netns.to_path_buf(), host.to_owned());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let dial = || -> Result<std::net::TcpStream, String> {
            let ns = std::fs::File::open(&netns).map_err(|e| format!("the rental's network is gone: {e}"))?;
            rustix::thread::move_into_link_name_space(ns.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
                .map_err(|e| {
                    format!("cannot enter the rental's network ({e}): forwarding needs the agent to run as root")
                })?;
            use std::net::ToSocketAddrs;
            let addrs = (host.as_str(), port).to_socket_addrs().map_err(|e| format!("cannot resolve {host}: {e}"))?;
            let mut last = format!("{host} has no address");
            for addr in addrs {
                match std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                    Ok(stream) => return Ok(stream),
                    Err(err) => last = format!("nothing answers on {addr} inside the rental: {err}"),
                }
            }
            Err(last)
        };
        let _ = tx.send(dial());
    });
    let stream = rx.await.map_err(|_| "the connecting thread failed".to_owned())??;
    stream.set_nonblocking(true).map_err(|e| e.to_string())?;
    tokio::net::TcpStream::from_std(stream).map_err(|e| e.to_string())
}

async fn run_tcp(
    supervisor: &Supervisor,
    rental_id: i64,
    host: &str,
    port: u16,
    mut input: mpsc::UnboundedReceiver<Input>,
    link: &Link,
) -> Result<(), String> {
    let (runtime, dir, _) = supervisor.entry(rental_id)?;
    let netns = runtime.network(&dir)?;
    let stream = connect_inside(&netns, host, port).await?;
    link.say(AgentMessage::ChannelOpened { channel: link.channel });
    let (reader, mut writer) = stream.into_split();
    let pump = link.pump(reader, Stream::Main);
    tokio::pin!(pump);
    let mut writing = true;
    loop {
        tokio::select! {
            () = &mut pump => break,
            received = input.recv() => match received {
                None => return Ok(()),
                Some(Input::Data(bytes)) => {
                    if writing && writer.write_all(&bytes).await.is_err() {
                        writing = false;
                    }
                    link.say(AgentMessage::ChannelWindow { channel: link.channel, bytes: bytes.len() as u64 });
                }
                Some(Input::Eof) => {
                    writing = false;
                    let _ = writer.shutdown().await;
                }
                Some(Input::Resize { .. }) => {}
            },
        }
    }
    link.say(AgentMessage::ChannelEof { channel: link.channel });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_locale_passes_from_the_client() {
        assert!(accepted("LANG", "en_US.UTF-8") && accepted("LC_ALL", "C"));
        assert!(!accepted("LD_PRELOAD", "/tmp/x.so") && !accepted("PATH", "/tmp"));
        assert!(!accepted("LANG", "$(reboot)") && !accepted("LC_X", &"a".repeat(65)));
    }

    #[test]
    fn targets_become_argv() {
        assert_eq!(argv_for(&ChannelTarget::Exec { command: "nvidia-smi".into() }).unwrap()[1..], ["-c", "nvidia-smi"]);
        assert_eq!(argv_for(&ChannelTarget::Shell).unwrap()[1], "-l");
        assert!(argv_for(&ChannelTarget::Tcp { host: "localhost".into(), port: 80 }).is_err());
    }
}
