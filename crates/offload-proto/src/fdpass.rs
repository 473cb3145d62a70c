//! Handing sockets to another process: one file descriptor per message
//! over a Unix socket (`SCM_RIGHTS`), tagged with one byte saying what the
//! socket is for.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Room for one descriptor in a control message (`CMSG_SPACE(sizeof(int))`,
/// rounded up generously; the kernel checks the real length).
const CONTROL_BYTES: usize = 64;

#[repr(C, align(8))]
struct ControlBuffer([u8; CONTROL_BYTES]);

/// Send `fd` with the tag byte `tag`. The descriptor stays open here too.
pub fn send_fd(socket: &UnixStream, tag: u8, fd: RawFd) -> io::Result<()> {
    let mut data = [tag];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = ControlBuffer([0; CONTROL_BYTES]);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives
    // the sendmsg call, and the control buffer holds `space` bytes.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        loop {
            let n = libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Receive one tagged descriptor; `Ok(None)` when the peer closed the
/// socket. A message without a descriptor is an error.
pub fn recv_fd(socket: &UnixStream) -> io::Result<Option<(u8, OwnedFd)>> {
    let mut data = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = ControlBuffer([0; CONTROL_BYTES]);
    // SAFETY: as in `send_fd`; received descriptors are taken into an
    // OwnedFd at once (MSG_CMSG_CLOEXEC: never leaked into children).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = CONTROL_BYTES as _;
        let n = loop {
            let n = libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 {
                break n;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        if n == 0 {
            return Ok(None);
        }
        let mut fd = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other("control message truncated"));
        }
        match fd {
            Some(fd) => Ok(Some((data[0], fd))),
            None => Err(io::Error::other("message without a descriptor")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_socket_crosses_with_its_tag_and_unread_bytes() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut inner_w, inner_r) = UnixStream::pair().unwrap();
        inner_w.write_all(b"still here").unwrap();
        send_fd(&a, b'g', inner_r.as_raw_fd()).unwrap();
        drop(inner_r);
        let (tag, fd) = recv_fd(&b).unwrap().unwrap();
        assert_eq!(tag, b'g');
        let mut got = UnixStream::from(fd);
        let mut buf = [0u8; 10];
        got.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"still here");
        drop(a);
        assert!(recv_fd(&b).unwrap().is_none(), "peer closed");
    }

    #[test]
    fn a_message_without_a_descriptor_is_refused() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"x").unwrap();
        assert!(recv_fd(&b).is_err());
    }
}
