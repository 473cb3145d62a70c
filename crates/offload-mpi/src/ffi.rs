//! libmpi, loaded at run time (`dlopen`), over our own minimal declarations.
//!
//! Nothing links against libmpi: a process that never asks for the MPI
//! plugin never maps it. The handful of MPI functions used here are looked
//! up by name; the predefined handles differ between the two MPI ABIs:
//!
//! * Open MPI (`libmpi.so.40`, what Debian's `openmpi-bin` installs, the one
//!   tested): handles are pointers to exported objects (`ompi_mpi_comm_world`,
//!   `ompi_mpi_byte`, `ompi_mpi_errors_return`); `MPI_Status` starts with
//!   `MPI_SOURCE`; `MPI_ANY_SOURCE` is -1.
//! * MPICH (`libmpi.so.12`; untested here): handles are `int` constants;
//!   `MPI_SOURCE` is the third `int` of `MPI_Status`; `MPI_ANY_SOURCE` is -2.
//!
//! Every call is made with the [`Mpi`] value's lock held by the caller
//! (see `transport`): MPI is used as if at `MPI_THREAD_SERIALIZED`.

use std::ffi::{c_char, c_int, c_void};

use offload_core::{Error, Result};

/// An MPI handle (communicator, datatype, error handler) passed by value:
/// a pointer in Open MPI, an `int` in MPICH (passed in the same register,
/// the callee reads the low 32 bits).
pub type Handle = usize;

/// `MPI_Request`: a pointer in Open MPI, an `int` in MPICH (which writes
/// and reads the low 32 bits of this zero-initialised word).
pub type Request = usize;

/// `MPI_Status`, with room to spare for either ABI (Open MPI: 24 bytes,
/// MPICH: 20 bytes).
#[repr(C)]
#[derive(Default)]
pub struct Status {
    words: [c_int; 4],
    ucount: usize,
    _spare: [u64; 4],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abi {
    OpenMpi,
    Mpich,
}

type FnIntPtr = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnInitThread =
    unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int;
type FnVoid = unsafe extern "C" fn() -> c_int;
type FnCommInt = unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
type FnCommDup = unsafe extern "C" fn(Handle, *mut Handle) -> c_int;
type FnSetErrhandler = unsafe extern "C" fn(Handle, Handle) -> c_int;
type FnSend = unsafe extern "C" fn(*const c_void, c_int, Handle, c_int, c_int, Handle) -> c_int;
type FnRecv =
    unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, c_int, Handle, *mut Status) -> c_int;
type FnIrecv =
    unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, c_int, Handle, *mut Request) -> c_int;
type FnTest = unsafe extern "C" fn(*mut Request, *mut c_int, *mut Status) -> c_int;
type FnGetCount = unsafe extern "C" fn(*const Status, Handle, *mut c_int) -> c_int;
type FnAllgather =
    unsafe extern "C" fn(*const c_void, c_int, Handle, *mut c_void, c_int, Handle, Handle) -> c_int;
type FnAbort = unsafe extern "C" fn(Handle, c_int) -> c_int;
type FnErrorString = unsafe extern "C" fn(c_int, *mut c_char, *mut c_int) -> c_int;
/// `MPI_Comm_copy_attr_function`.
pub type CopyAttrFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function`.
pub type DeleteAttrFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;
type FnCreateKeyval =
    unsafe extern "C" fn(CopyAttrFn, DeleteAttrFn, *mut c_int, *mut c_void) -> c_int;
type FnSetAttr = unsafe extern "C" fn(Handle, c_int, *mut c_void) -> c_int;

/// The loaded library and the functions and handles used.
pub struct Mpi {
    pub abi: Abi,
    pub library: String,
    initialized: FnIntPtr,
    finalized: FnIntPtr,
    init_thread: FnInitThread,
    finalize: FnVoid,
    comm_rank: FnCommInt,
    comm_size: FnCommInt,
    comm_dup: FnCommDup,
    set_errhandler: FnSetErrhandler,
    send: FnSend,
    recv: FnRecv,
    irecv: FnIrecv,
    test: FnTest,
    get_count: FnGetCount,
    allgather: FnAllgather,
    abort: FnAbort,
    error_string: FnErrorString,
    query_thread: FnIntPtr,
    create_keyval: FnCreateKeyval,
    set_attr: FnSetAttr,
    pub comm_world: Handle,
    comm_self: Handle,
    pub byte: Handle,
    errors_return: Handle,
    any_source: c_int,
    /// Keeps the functions above valid.
    _lib: libloading::os::unix::Library,
}

pub const THREAD_SINGLE: c_int = 0;
pub const THREAD_FUNNELED: c_int = 1;
pub const THREAD_SERIALIZED: c_int = 2;
pub const THREAD_MULTIPLE: c_int = 3;

/// Library names tried in order when `OFFLOAD_MPI_LIBRARY` is not set and
/// the launcher does not say which MPI started us (see [`candidates`]).
const CANDIDATES: &[&str] = &[
    "libmpi.so.40",
    "libmpich.so.12",
    "libmpi.so.12",
    "libmpi.so",
];

/// The library names to try: Open MPI's first under Open MPI's launcher
/// (`OMPI_*` variables), MPICH's first under a PMI launcher (MPICH's
/// hydra `mpiexec`, Slurm's `srun` with PMI: `PMI_RANK`), which cannot run
/// the other's library. `lookup` reads the environment.
pub fn candidates(lookup: impl Fn(&str) -> Option<String>) -> Vec<&'static str> {
    let var = |k: &str| lookup(k);
    let mut names = CANDIDATES.to_vec();
    if var("OMPI_COMM_WORLD_SIZE").is_none() && var("PMI_RANK").is_some() {
        names.sort_by_key(|n| !n.ends_with(".so.12"));
    }
    names
}

impl Mpi {
    /// Load libmpi: `OFFLOAD_MPI_LIBRARY` if set, else the usual sonames.
    pub fn load() -> Result<Mpi> {
        let names: Vec<String> = match std::env::var("OFFLOAD_MPI_LIBRARY") {
            Ok(v) if !v.is_empty() => vec![v],
            _ => candidates(|k| std::env::var(k).ok())
                .into_iter()
                .map(String::from)
                .collect(),
        };
        let mut errors = Vec::new();
        for name in &names {
            // RTLD_GLOBAL: Open MPI dlopens its own components, which
            // resolve libmpi's symbols from the global scope.
            // SAFETY: loading a shared library runs its initialisers; libmpi's
            // do not start MPI (that is MPI_Init's job).
            let lib = unsafe {
                libloading::os::unix::Library::open(
                    Some(name.as_str()),
                    libloading::os::unix::RTLD_NOW | libc::RTLD_GLOBAL,
                )
            };
            match lib {
                Ok(lib) => return Self::bind(lib, name.clone()),
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        Err(Error::backend(format!(
            "cannot load an MPI library (set OFFLOAD_MPI_LIBRARY): {}",
            errors.join("; ")
        )))
    }

    fn bind(lib: libloading::os::unix::Library, library: String) -> Result<Mpi> {
        fn sym<T: Copy>(lib: &libloading::os::unix::Library, name: &str) -> Result<T> {
            // SAFETY: the caller names the C type of `name` as `T` (the MPI
            // standard's prototype, see the type aliases above).
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| Error::backend(format!("libmpi lacks {name}: {e}")))
        }
        fn addr(lib: &libloading::os::unix::Library, name: &str) -> Option<Handle> {
            // SAFETY: only the symbol's address is taken, never read here.
            unsafe { lib.get::<*const c_void>(name.as_bytes()) }
                .ok()
                .map(|s| s.into_raw() as Handle)
        }
        let object = |name: &str| {
            addr(&lib, name).ok_or_else(|| Error::backend(format!("libmpi lacks {name}")))
        };
        let (abi, comm_world, comm_self, byte, errors_return, any_source) =
            match addr(&lib, "ompi_mpi_comm_world") {
                Some(world) => (
                    Abi::OpenMpi,
                    world,
                    object("ompi_mpi_comm_self")?,
                    object("ompi_mpi_byte")?,
                    object("ompi_mpi_errors_return")?,
                    -1,
                ),
                // MPICH's mpi.h constants.
                None => (
                    Abi::Mpich,
                    0x4400_0000,
                    0x4400_0001,
                    0x4c00_010d,
                    0x5400_0001,
                    -2,
                ),
            };
        Ok(Mpi {
            abi,
            library,
            initialized: sym(&lib, "MPI_Initialized")?,
            finalized: sym(&lib, "MPI_Finalized")?,
            init_thread: sym(&lib, "MPI_Init_thread")?,
            finalize: sym(&lib, "MPI_Finalize")?,
            comm_rank: sym(&lib, "MPI_Comm_rank")?,
            comm_size: sym(&lib, "MPI_Comm_size")?,
            comm_dup: sym(&lib, "MPI_Comm_dup")?,
            set_errhandler: sym(&lib, "MPI_Comm_set_errhandler")?,
            send: sym(&lib, "MPI_Send")?,
            recv: sym(&lib, "MPI_Recv")?,
            irecv: sym(&lib, "MPI_Irecv")?,
            test: sym(&lib, "MPI_Test")?,
            get_count: sym(&lib, "MPI_Get_count")?,
            allgather: sym(&lib, "MPI_Allgather")?,
            abort: sym(&lib, "MPI_Abort")?,
            error_string: sym(&lib, "MPI_Error_string")?,
            query_thread: sym(&lib, "MPI_Query_thread")?,
            create_keyval: sym(&lib, "MPI_Comm_create_keyval")?,
            set_attr: sym(&lib, "MPI_Comm_set_attr")?,
            comm_world,
            comm_self,
            byte,
            errors_return,
            any_source,
            _lib: lib,
        })
    }

    fn check(&self, what: &str, rc: c_int) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        let mut buf = [0 as c_char; 512];
        let mut len: c_int = 0;
        // SAFETY: MPI_Error_string writes at most MPI_MAX_ERROR_STRING (256
        // in both ABIs) bytes into `buf`.
        let text = unsafe {
            if (self.error_string)(rc, buf.as_mut_ptr(), &mut len) == 0 {
                let bytes =
                    std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), len.max(0) as usize);
                String::from_utf8_lossy(bytes).into_owned()
            } else {
                format!("error {rc}")
            }
        };
        Err(Error::backend(format!("{what} failed: {text}")))
    }

    pub fn is_initialized(&self) -> bool {
        let mut flag: c_int = 0;
        // SAFETY: MPI_Initialized may be called at any time.
        unsafe { (self.initialized)(&mut flag) };
        flag != 0
    }

    pub fn is_finalized(&self) -> bool {
        let mut flag: c_int = 0;
        // SAFETY: MPI_Finalized may be called at any time.
        unsafe { (self.finalized)(&mut flag) };
        flag != 0
    }

    /// `MPI_Init_thread(NULL, NULL, required, &provided)`; returns `provided`.
    pub fn init_thread(&self, required: c_int) -> Result<c_int> {
        let mut provided: c_int = 0;
        // SAFETY: NULL argc/argv are allowed since MPI-2.
        let rc = unsafe {
            (self.init_thread)(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                required,
                &mut provided,
            )
        };
        self.check("MPI_Init_thread", rc)?;
        Ok(provided)
    }

    /// The thread level MPI was initialised with (`MPI_Query_thread`).
    pub fn thread_level(&self) -> Result<c_int> {
        let mut level: c_int = 0;
        // SAFETY: plain out-parameter; MPI is initialised.
        self.check("MPI_Query_thread", unsafe {
            (self.query_thread)(&mut level)
        })?;
        Ok(level)
    }

    /// Have `on_delete` called when `MPI_COMM_SELF`'s attributes are
    /// deleted: the first thing `MPI_Finalize` does, with MPI still fully
    /// usable (MPI-2.0 and later).
    pub fn call_at_finalize(&self, on_delete: DeleteAttrFn) -> Result<()> {
        /// Attribute copies: none (MPI_COMM_SELF is never duplicated by us).
        unsafe extern "C" fn no_copy(
            _: Handle,
            _: c_int,
            _: *mut c_void,
            _: *mut c_void,
            _: *mut c_void,
            flag: *mut c_int,
        ) -> c_int {
            // SAFETY: MPI passes a valid flag pointer.
            unsafe { *flag = 0 };
            0
        }
        let mut keyval: c_int = 0;
        // SAFETY: two callbacks with the standard's signatures; plain
        // out-parameter; no extra state.
        unsafe {
            self.check(
                "MPI_Comm_create_keyval",
                (self.create_keyval)(no_copy, on_delete, &mut keyval, std::ptr::null_mut()),
            )?;
            self.check(
                "MPI_Comm_set_attr",
                (self.set_attr)(self.comm_self, keyval, std::ptr::null_mut()),
            )
        }
    }

    pub fn finalize(&self) -> Result<()> {
        // SAFETY: called once, after every other MPI call of this process.
        let rc = unsafe { (self.finalize)() };
        self.check("MPI_Finalize", rc)
    }

    pub fn rank_and_size(&self, comm: Handle) -> Result<(c_int, c_int)> {
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: plain out-parameters.
        unsafe {
            self.check("MPI_Comm_rank", (self.comm_rank)(comm, &mut rank))?;
            self.check("MPI_Comm_size", (self.comm_size)(comm, &mut size))?;
        }
        Ok((rank, size))
    }

    /// A private communicator over `comm` whose errors are returned, not fatal.
    pub fn dup_returning_errors(&self, comm: Handle) -> Result<Handle> {
        let mut out: Handle = 0;
        // SAFETY: plain out-parameter (pointer-sized: fits either ABI's handle).
        unsafe {
            self.check("MPI_Comm_dup", (self.comm_dup)(comm, &mut out))?;
            self.check(
                "MPI_Comm_set_errhandler",
                (self.set_errhandler)(out, self.errors_return),
            )?;
        }
        Ok(out)
    }

    /// Every rank's `mine` (one byte each), in rank order.
    pub fn allgather_byte(&self, comm: Handle, mine: u8, size: usize) -> Result<Vec<u8>> {
        let mut all = vec![0u8; size];
        // SAFETY: `all` holds one byte per rank of `comm`.
        let rc = unsafe {
            (self.allgather)(
                (&mine as *const u8).cast(),
                1,
                self.byte,
                all.as_mut_ptr().cast(),
                1,
                self.byte,
                comm,
            )
        };
        self.check("MPI_Allgather", rc)?;
        Ok(all)
    }

    /// Send `data` (at most `i32::MAX` bytes) to `dest`.
    pub fn send(&self, comm: Handle, dest: c_int, tag: c_int, data: &[u8]) -> Result<()> {
        self.send_raw(comm, dest, tag, data.as_ptr(), data.len())
    }

    /// Send `len` bytes at `ptr`.
    pub fn send_raw(
        &self,
        comm: Handle,
        dest: c_int,
        tag: c_int,
        ptr: *const u8,
        len: usize,
    ) -> Result<()> {
        let count = c_int::try_from(len)
            .map_err(|_| Error::invalid_size(format!("one MPI message of {len} bytes")))?;
        // SAFETY: the caller guarantees `ptr` is readable for `len` bytes.
        let rc = unsafe { (self.send)(ptr.cast(), count, self.byte, dest, tag, comm) };
        self.check("MPI_Send", rc)
    }

    /// Receive exactly `len` bytes from `source` into `ptr`.
    pub fn recv_raw(
        &self,
        comm: Handle,
        source: c_int,
        tag: c_int,
        ptr: *mut u8,
        len: usize,
    ) -> Result<()> {
        let count = c_int::try_from(len)
            .map_err(|_| Error::invalid_size(format!("one MPI message of {len} bytes")))?;
        let mut st = Status::default();
        // SAFETY: the caller guarantees `ptr` is writable for `len` bytes.
        let rc = unsafe { (self.recv)(ptr.cast(), count, self.byte, source, tag, comm, &mut st) };
        self.check("MPI_Recv", rc)
    }

    /// Receive one message with `tag` from `source` (or any source) into
    /// `buf`: (source rank, its length). A longer message is an error
    /// (`MPI_ERR_TRUNCATE`). Waits as [`Patience`] says: a blocking
    /// `MPI_Recv` would spin a core for as long as the other side works
    /// (a serving rank's kernel, an application's host code), and that core
    /// is often the one the other side needs.
    pub fn recv_into(
        &self,
        comm: Handle,
        source: c_int,
        tag: c_int,
        buf: &mut [u8],
        patience: Patience,
    ) -> Result<(c_int, usize)> {
        let capacity = c_int::try_from(buf.len()).unwrap_or(c_int::MAX);
        let mut st = Status::default();
        let mut request: Request = 0;
        // SAFETY: `buf` is writable for `capacity` bytes and stays borrowed
        // (so alive and unused) until the request completes below.
        let rc = unsafe {
            (self.irecv)(
                buf.as_mut_ptr().cast(),
                capacity,
                self.byte,
                source,
                tag,
                comm,
                &mut request,
            )
        };
        self.check("MPI_Irecv", rc)?;
        let mut waited = patience.waiter();
        loop {
            let mut done: c_int = 0;
            // SAFETY: `request` came from MPI_Irecv and is not complete yet.
            let rc = unsafe { (self.test)(&mut request, &mut done, &mut st) };
            self.check("MPI_Test", rc)?;
            if done != 0 {
                break;
            }
            waited.pause();
        }
        let mut count: c_int = 0;
        // SAFETY: `st` was filled by MPI_Test for the completed receive.
        self.check("MPI_Get_count", unsafe {
            (self.get_count)(&st, self.byte, &mut count)
        })?;
        Ok((self.source_of(&st), count.max(0) as usize))
    }

    fn source_of(&self, st: &Status) -> c_int {
        match self.abi {
            Abi::OpenMpi => st.words[0],
            Abi::Mpich => st.words[2],
        }
    }

    /// `MPI_ANY_SOURCE` of this ABI.
    pub fn any_source(&self) -> c_int {
        self.any_source
    }

    /// End the whole job (a serving rank that cannot go on).
    pub fn abort(&self, code: c_int) {
        // SAFETY: MPI_Abort on the world communicator; does not return.
        unsafe { (self.abort)(self.comm_world, code) };
    }
}

/// How a receive waits for its message: it polls without pause for
/// `spin`, then sleeps between polls, the pause doubling from 10 us up to
/// `max_sleep`. A message that comes within `spin` (a request answered at
/// once, the next of a stream of requests) costs no more than a blocking
/// receive; a long wait costs a poll every `max_sleep` instead of a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patience {
    pub spin: std::time::Duration,
    pub max_sleep: std::time::Duration,
}

impl Default for Patience {
    fn default() -> Self {
        Patience {
            spin: std::time::Duration::from_micros(50),
            max_sleep: std::time::Duration::from_micros(200),
        }
    }
}

impl Patience {
    /// `OFFLOAD_MPI_SPIN_US` (microseconds of polling before sleeping; a
    /// large value spins like a blocking receive), else the default.
    pub fn from_env() -> Result<Patience> {
        let mut p = Patience::default();
        if let Ok(v) = std::env::var("OFFLOAD_MPI_SPIN_US") {
            let us: u64 = v.trim().parse().map_err(|_| {
                Error::invalid_argument(format!(
                    "OFFLOAD_MPI_SPIN_US={v:?}: not a number of microseconds"
                ))
            })?;
            p.spin = std::time::Duration::from_micros(us);
        }
        Ok(p)
    }

    fn waiter(self) -> Waiter {
        Waiter {
            patience: self,
            start: std::time::Instant::now(),
            sleep: std::time::Duration::from_micros(10),
        }
    }
}

/// One wait's state (see [`Patience`]).
struct Waiter {
    patience: Patience,
    start: std::time::Instant,
    sleep: std::time::Duration,
}

impl Waiter {
    fn pause(&mut self) {
        if self.start.elapsed() < self.patience.spin {
            std::hint::spin_loop();
            return;
        }
        std::thread::sleep(self.sleep);
        self.sleep = (self.sleep * 2).min(self.patience.max_sleep);
    }
}

#[cfg(test)]
mod patience_tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn waits_spin_then_sleep_with_a_growing_capped_pause() {
        let p = Patience {
            spin: Duration::from_millis(2),
            max_sleep: Duration::from_micros(200),
        };
        let mut w = p.waiter();
        // Within the spin window a pause returns at once.
        let t = Instant::now();
        w.pause();
        assert!(t.elapsed() < Duration::from_millis(1));
        assert_eq!(w.sleep, Duration::from_micros(10));
        std::thread::sleep(Duration::from_millis(3));
        let mut sleeps = Vec::new();
        for _ in 0..8 {
            w.pause();
            sleeps.push(w.sleep);
        }
        assert_eq!(sleeps[0], Duration::from_micros(20));
        assert_eq!(sleeps[3], Duration::from_micros(160));
        assert!(sleeps[4..].iter().all(|&s| s == Duration::from_micros(200)));
    }

    #[test]
    fn the_spin_window_comes_from_the_environment_or_is_refused() {
        // One test touches the variable: tests of this module run in parallel.
        std::env::set_var("OFFLOAD_MPI_SPIN_US", "1000");
        assert_eq!(Patience::from_env().unwrap().spin, Duration::from_millis(1));
        std::env::set_var("OFFLOAD_MPI_SPIN_US", "soon");
        let e = Patience::from_env().unwrap_err();
        assert!(e.to_string().contains("OFFLOAD_MPI_SPIN_US"), "{e}");
        std::env::remove_var("OFFLOAD_MPI_SPIN_US");
        assert_eq!(Patience::from_env().unwrap(), Patience::default());
    }
}
