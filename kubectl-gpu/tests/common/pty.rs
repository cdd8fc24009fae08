//! A pseudo-terminal for the plugin's stdin, stdout and stderr, so that it sees a
//! terminal (colour, `--watch` redrawing in place) as it does in a user's shell; the test
//! reads what the terminal would have shown.

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// A child on a pseudo-terminal and everything it wrote.
pub struct OnTerminal {
    pub child: Child,
    output: Arc<Mutex<Vec<u8>>>,
}

impl OnTerminal {
    /// Spawns `command` with a 200×50 terminal as its stdin, stdout and stderr.
    pub fn spawn(mut command: Command) -> OnTerminal {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize { ws_row: 50, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: openpty writes two file descriptors into the integers it is given.
        let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here alone.
        let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let slave = File::from(slave);
        command
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        let child = command.spawn().unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        let sink = output.clone();
        std::thread::spawn(move || {
            let mut master = File::from(master);
            let mut buf = [0u8; 4096];
            // Ends with EIO once the child (the last holder of the slave side) exits.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        OnTerminal { child, output }
    }

    /// What the terminal has received so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Sends SIGINT (Ctrl-C) and returns the exit code.
    pub fn interrupt(mut self) -> i32 {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(i32::try_from(self.child.id()).unwrap(), libc::SIGINT);
        }
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}
