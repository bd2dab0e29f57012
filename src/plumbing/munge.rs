//! MUNGE credentials, through libmunge loaded at run time.
//!
//! A **credential** is the armoured text (`MUNGE:...:`) that the local munged makes for the
//! calling process: it carries that process's uid and gid, an optional **payload** (bytes,
//! signed and, with the site's default cipher, encrypted inside the credential), the time
//! it was made and its **time to live**, and optionally the one uid allowed to decode it
//! (the **uid restriction**). Any munged holding the same key decodes it and says who made
//! it; munged alone decides, from the key, whether to believe it.
//!
//! libmunge is opened with `dlopen("libmunge.so.2")` on the first [`Munge::open`], not
//! linked: building the crate needs no MUNGE header or library, and a daemon or client that
//! never speaks to the network never needs the library (Debian's `libmunge2`). The handle is
//! never closed, so the function pointers read from it stay valid for the process's life.
//!
//! **Contexts and threads.** A libmunge context is not thread-safe, and one used to decode
//! is overwritten with the credential's settings. So [`Munge`] keeps no context: each
//! [`Munge::encode`] and [`Munge::decode`] creates one, sets it, uses it and destroys it on
//! the calling thread. A `Munge` holds only the library's function table and the socket
//! path, and is `Send + Sync`. Each call is a round trip to munged over its Unix socket and
//! blocks: async code calls it from `spawn_blocking`.
//!
//! **Memory.** Every buffer libmunge returns (the credential from `munge_encode`, the
//! payload from `munge_decode`, on success and on the errors that still return one:
//! expired, rewound, replayed) is copied and then released with `free`. Text from libmunge
//! (`munge_strerror`, `munge_ctx_strerror`) is read lossily: no byte it returns can panic.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

/// The longest credential [`Munge::decode`] passes to munged, in bytes. A credential
/// holding the largest payload ([`MAX_PAYLOAD`]) is about 4/3 of it plus some 150 bytes of
/// armour, header and MAC; anything longer did not come from [`Munge::encode`] and is
/// refused before munged reads it.
pub const MAX_CREDENTIAL: usize = 8192;

/// The largest payload [`Munge::encode`] signs, in bytes. A request's binding
/// (`request_binding`) is under 600 bytes; the bound keeps a credential small enough to
/// travel in a request's header.
pub const MAX_PAYLOAD: usize = 4096;

/// The package that provides libmunge.so.2 on Debian.
pub const LIBRARY_PACKAGE: &str = "libmunge2";

// munge.h, MUNGE 0.5 (the values are part of libmunge's ABI, soname 2).
const MUNGE_OPT_TTL: c_int = 4;
const MUNGE_OPT_ADDR4: c_int = 5;
const MUNGE_OPT_SOCKET: c_int = 8;
const MUNGE_OPT_UID_RESTRICTION: c_int = 9;

const EMUNGE_SUCCESS: c_int = 0;
const EMUNGE_SOCKET: c_int = 6;
const EMUNGE_TIMEOUT: c_int = 7;
const EMUNGE_BAD_CRED: c_int = 8;
const EMUNGE_BAD_VERSION: c_int = 9;
const EMUNGE_BAD_CIPHER: c_int = 10;
const EMUNGE_BAD_MAC: c_int = 11;
const EMUNGE_BAD_ZIP: c_int = 12;
const EMUNGE_BAD_REALM: c_int = 13;
const EMUNGE_CRED_INVALID: c_int = 14;
const EMUNGE_CRED_EXPIRED: c_int = 15;
const EMUNGE_CRED_REWOUND: c_int = 16;
const EMUNGE_CRED_REPLAYED: c_int = 17;
const EMUNGE_CRED_UNAUTHORIZED: c_int = 18;

/// Why MUNGE gave no credential, or refused one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MungeError {
    #[error("cannot load libmunge.so.2 ({detail}): install Debian's {LIBRARY_PACKAGE} package")]
    Library { detail: String },
    #[error("{what} is {len} bytes, more than the {max} allowed")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{what} holds a NUL byte")]
    Nul { what: &'static str },
    #[error("time to live {0} s is more than MUNGE takes (at most {max} s)", max = c_int::MAX)]
    Ttl(u32),
    #[error("libmunge could not allocate a context")]
    NoContext,
    /// munged did not answer: not running, or not at this socket (`EMUNGE_SOCKET`).
    #[error("cannot reach munged: {detail}; is munged running, and is this its socket?")]
    Socket { detail: String },
    /// The credential's time to live has passed (`EMUNGE_CRED_EXPIRED`).
    #[error("credential expired")]
    Expired,
    /// The credential was made in the future, beyond the allowed skew (`EMUNGE_CRED_REWOUND`).
    #[error("credential rewound: made in the future; are the clocks in step?")]
    Rewound,
    /// This munged decoded this credential before (`EMUNGE_CRED_REPLAYED`).
    #[error("credential replayed")]
    Replayed,
    /// The credential is restricted to another uid (`EMUNGE_CRED_UNAUTHORIZED`).
    #[error("credential not for this uid")]
    Unauthorized,
    /// Not a credential of this key: malformed, another key, another realm, a bad MAC
    /// (`EMUNGE_BAD_CRED` ..= `EMUNGE_CRED_INVALID`).
    #[error("invalid credential (munge error {code}): {detail}")]
    Invalid { code: i32, detail: String },
    /// Any other error of libmunge or munged, with its code and text.
    #[error("munge error {code}: {detail}")]
    Other { code: i32, detail: String },
    /// libmunge broke its own contract (a negative length, non-ASCII armour).
    #[error("libmunge returned {0}")]
    Contract(&'static str),
}

impl MungeError {
    /// A stable name for logs and tests; the prose is for people.
    pub fn code(&self) -> &'static str {
        match self {
            MungeError::Library { .. } => "library",
            MungeError::TooLong { .. } => "too_long",
            MungeError::Nul { .. } => "nul",
            MungeError::Ttl(_) => "ttl",
            MungeError::NoContext => "no_context",
            MungeError::Socket { .. } => "socket",
            MungeError::Expired => "expired",
            MungeError::Rewound => "rewound",
            MungeError::Replayed => "replayed",
            MungeError::Unauthorized => "unauthorized",
            MungeError::Invalid { .. } => "invalid",
            MungeError::Other { .. } => "other",
            MungeError::Contract(_) => "contract",
        }
    }
}

/// What a decoded credential says: who made it, and what they signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub uid: u32,
    pub gid: u32,
    pub payload: Vec<u8>,
    /// The IPv4 address of the host whose munged made the credential, as that munged
    /// stated it inside the signed credential (`MUNGE_OPT_ADDR4`): the address its host
    /// name resolves to there, which on a node whose name resolves to a loopback address
    /// (Debian's `127.0.1.1` in /etc/hosts) or to nothing (`0.0.0.0`) names no node.
    pub origin: std::net::Ipv4Addr,
}

type Ctx = *mut c_void;

// The functions' types, as munge.h declares them.
type CtxCreate = unsafe extern "C" fn() -> Ctx;
type CtxDestroy = unsafe extern "C" fn(Ctx);
type CtxSet = unsafe extern "C" fn(Ctx, c_int, ...) -> c_int;
type CtxGet = unsafe extern "C" fn(Ctx, c_int, ...) -> c_int;
type CtxStrerror = unsafe extern "C" fn(Ctx) -> *const c_char;
type Encode = unsafe extern "C" fn(*mut *mut c_char, Ctx, *const c_void, c_int) -> c_int;
type Decode = unsafe extern "C" fn(
    *const c_char,
    Ctx,
    *mut *mut c_void,
    *mut c_int,
    *mut libc::uid_t,
    *mut libc::gid_t,
) -> c_int;
type Strerror = unsafe extern "C" fn(c_int) -> *const c_char;

/// libmunge's functions, read once from the library.
struct Lib {
    ctx_create: CtxCreate,
    ctx_destroy: CtxDestroy,
    ctx_set: CtxSet,
    ctx_get: CtxGet,
    ctx_strerror: CtxStrerror,
    encode: Encode,
    decode: Decode,
    strerror: Strerror,
}

/// The last `dlerror()`, or `fallback`.
fn dlerror(fallback: &str) -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call
    // on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        fallback.to_string()
    } else {
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

impl Lib {
    /// Opens `name` (libmunge.so.2) and reads its functions.
    fn load(name: &CStr) -> Result<Lib, MungeError> {
        // SAFETY: dlopen of a library whose initialisers have no preconditions.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW) };
        if handle.is_null() {
            return Err(MungeError::Library {
                detail: dlerror("dlopen failed"),
            });
        }
        let sym = |name: &CStr| -> Result<*mut c_void, MungeError> {
            // SAFETY: handle is a live handle that is never closed.
            let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
            if p.is_null() {
                Err(MungeError::Library {
                    detail: dlerror(&format!("no symbol {}", name.to_string_lossy())),
                })
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol is transmuted to the type munge.h declares for it.
        unsafe {
            Ok(Lib {
                ctx_create: std::mem::transmute::<*mut c_void, CtxCreate>(sym(
                    c"munge_ctx_create",
                )?),
                ctx_destroy: std::mem::transmute::<*mut c_void, CtxDestroy>(sym(
                    c"munge_ctx_destroy",
                )?),
                ctx_set: std::mem::transmute::<*mut c_void, CtxSet>(sym(c"munge_ctx_set")?),
                ctx_get: std::mem::transmute::<*mut c_void, CtxGet>(sym(c"munge_ctx_get")?),
                ctx_strerror: std::mem::transmute::<*mut c_void, CtxStrerror>(sym(
                    c"munge_ctx_strerror",
                )?),
                encode: std::mem::transmute::<*mut c_void, Encode>(sym(c"munge_encode")?),
                decode: std::mem::transmute::<*mut c_void, Decode>(sym(c"munge_decode")?),
                strerror: std::mem::transmute::<*mut c_void, Strerror>(sym(c"munge_strerror")?),
            })
        }
    }

    fn get() -> Result<&'static Lib, MungeError> {
        static LIB: OnceLock<Result<Lib, MungeError>> = OnceLock::new();
        LIB.get_or_init(|| Lib::load(c"libmunge.so.2"))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// One libmunge context, destroyed on drop.
struct Context<'a> {
    lib: &'a Lib,
    ctx: Ctx,
}

impl<'a> Context<'a> {
    fn new(lib: &'a Lib, socket: Option<&CStr>) -> Result<Self, MungeError> {
        // SAFETY: no arguments; NULL means out of memory.
        let ctx = unsafe { (lib.ctx_create)() };
        if ctx.is_null() {
            return Err(MungeError::NoContext);
        }
        let c = Context { lib, ctx };
        if let Some(path) = socket {
            // SAFETY: MUNGE_OPT_SOCKET takes a `char *`, which libmunge copies.
            let rc = unsafe { (lib.ctx_set)(ctx, MUNGE_OPT_SOCKET, path.as_ptr()) };
            c.check(rc)?;
        }
        Ok(c)
    }

    /// `rc` as a result, with the context's detailed message when it has one.
    fn check(&self, rc: c_int) -> Result<(), MungeError> {
        if rc == EMUNGE_SUCCESS {
            return Ok(());
        }
        // SAFETY: ctx is live; the string (or NULL) belongs to it and is copied at once.
        let detail = unsafe { (self.lib.ctx_strerror)(self.ctx) };
        let detail = if detail.is_null() {
            // SAFETY: munge_strerror returns a static string for any code.
            let s = unsafe { (self.lib.strerror)(rc) };
            if s.is_null() {
                String::new()
            } else {
                unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
            }
        } else {
            unsafe { CStr::from_ptr(detail) }
                .to_string_lossy()
                .into_owned()
        };
        Err(MungeError::of_code(rc, detail))
    }
}

impl MungeError {
    /// The error of MUNGE's error number `rc` (libmunge's, or the exit status of MUNGE's
    /// commands, which is the same number), with its text.
    pub fn of_code(rc: c_int, detail: String) -> MungeError {
        match rc {
            EMUNGE_SOCKET | EMUNGE_TIMEOUT => MungeError::Socket { detail },
            EMUNGE_CRED_EXPIRED => MungeError::Expired,
            EMUNGE_CRED_REWOUND => MungeError::Rewound,
            EMUNGE_CRED_REPLAYED => MungeError::Replayed,
            EMUNGE_CRED_UNAUTHORIZED => MungeError::Unauthorized,
            EMUNGE_BAD_CRED | EMUNGE_BAD_VERSION | EMUNGE_BAD_CIPHER | EMUNGE_BAD_MAC
            | EMUNGE_BAD_ZIP | EMUNGE_BAD_REALM | EMUNGE_CRED_INVALID => {
                MungeError::Invalid { code: rc, detail }
            }
            _ => MungeError::Other { code: rc, detail },
        }
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // SAFETY: ctx came from munge_ctx_create and is destroyed once.
        unsafe { (self.lib.ctx_destroy)(self.ctx) }
    }
}

/// Frees a buffer libmunge allocated, on every path out of a call.
struct Malloced(*mut c_void);

impl Drop for Malloced {
    fn drop(&mut self) {
        // SAFETY: the pointer is NULL or was allocated by libmunge with malloc.
        unsafe { libc::free(self.0) }
    }
}

/// The local munged, through libmunge.
pub struct Munge {
    lib: &'static Lib,
    socket: Option<CString>,
}

impl std::fmt::Debug for Munge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Munge")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl Munge {
    /// Loads libmunge (once per process) and speaks to munged at `socket`, or at
    /// libmunge's default (`/run/munge/munge.socket.2`). Does not contact munged.
    pub fn open(socket: Option<&Path>) -> Result<Munge, MungeError> {
        let socket = socket
            .map(|p| {
                CString::new(p.as_os_str().as_bytes()).map_err(|_| MungeError::Nul {
                    what: "the munge socket path",
                })
            })
            .transpose()?;
        Ok(Munge {
            lib: Lib::get()?,
            socket,
        })
    }

    /// The socket this speaks to munged at, when not libmunge's default.
    pub fn socket(&self) -> Option<&std::ffi::OsStr> {
        self.socket
            .as_deref()
            .map(|c| std::ffi::OsStr::from_bytes(c.to_bytes()))
    }

    /// A credential for the calling process's uid and gid, holding `payload`, decodable
    /// only by `restrict_uid` when given, valid for `ttl` seconds (munged's default, 300,
    /// when `None`; munged caps it at its `--max-ttl`).
    pub fn encode(
        &self,
        payload: &[u8],
        restrict_uid: Option<u32>,
        ttl: Option<u32>,
    ) -> Result<String, MungeError> {
        if payload.len() > MAX_PAYLOAD {
            return Err(MungeError::TooLong {
                what: "the payload",
                len: payload.len(),
                max: MAX_PAYLOAD,
            });
        }
        let ctx = Context::new(self.lib, self.socket.as_deref())?;
        if let Some(uid) = restrict_uid {
            // SAFETY: MUNGE_OPT_UID_RESTRICTION takes a uid_t.
            let rc = unsafe {
                (self.lib.ctx_set)(ctx.ctx, MUNGE_OPT_UID_RESTRICTION, uid as libc::uid_t)
            };
            ctx.check(rc)?;
        }
        if let Some(ttl) = ttl {
            let ttl = c_int::try_from(ttl).map_err(|_| MungeError::Ttl(ttl))?;
            // SAFETY: MUNGE_OPT_TTL takes an int.
            let rc = unsafe { (self.lib.ctx_set)(ctx.ctx, MUNGE_OPT_TTL, ttl) };
            ctx.check(rc)?;
        }
        let mut cred: *mut c_char = std::ptr::null_mut();
        // SAFETY: payload is valid for its length (at most MAX_PAYLOAD, so it fits an int);
        // on return cred is NULL or a malloc'd NUL-terminated string, owned by `_free`.
        let rc = unsafe {
            (self.lib.encode)(
                &mut cred,
                ctx.ctx,
                payload.as_ptr().cast(),
                payload.len() as c_int,
            )
        };
        let _free = Malloced(cred.cast());
        ctx.check(rc)?;
        if cred.is_null() {
            return Err(MungeError::Contract("no credential and no error"));
        }
        // SAFETY: a NUL-terminated string, freed only when `_free` drops after this copy.
        let bytes = unsafe { CStr::from_ptr(cred) }.to_bytes().to_vec();
        String::from_utf8(bytes).map_err(|_| MungeError::Contract("a credential that is not text"))
    }

    /// Asks munged whether `cred` is a credential of its key, still valid, not seen before
    /// on this host, and decodable by this process's uid; if so, who made it and what it
    /// carries. Takes bytes: a credential is ASCII, but one read from the network is not
    /// trusted to be.
    pub fn decode(&self, cred: impl AsRef<[u8]>) -> Result<Decoded, MungeError> {
        let cred = cred.as_ref();
        if cred.len() > MAX_CREDENTIAL {
            return Err(MungeError::TooLong {
                what: "the credential",
                len: cred.len(),
                max: MAX_CREDENTIAL,
            });
        }
        let cred = CString::new(cred).map_err(|_| MungeError::Nul {
            what: "the credential",
        })?;
        let ctx = Context::new(self.lib, self.socket.as_deref())?;
        let mut buf: *mut c_void = std::ptr::null_mut();
        let mut len: c_int = 0;
        let mut uid: libc::uid_t = 0;
        let mut gid: libc::gid_t = 0;
        // SAFETY: cred is NUL-terminated; every out pointer is valid. On return buf is NULL
        // or malloc'd (also on expired, rewound and replayed), owned by `_free`.
        let rc = unsafe {
            (self.lib.decode)(
                cred.as_ptr(),
                ctx.ctx,
                &mut buf,
                &mut len,
                &mut uid,
                &mut gid,
            )
        };
        let _free = Malloced(buf);
        ctx.check(rc)?;
        let payload = match (buf.is_null(), usize::try_from(len)) {
            (_, Err(_)) => return Err(MungeError::Contract("a negative payload length")),
            (true, Ok(0)) => Vec::new(),
            (true, Ok(_)) => return Err(MungeError::Contract("a length without a payload")),
            // SAFETY: buf holds len bytes (and a NUL after them), freed after this copy.
            (false, Ok(n)) => unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) }.to_vec(),
        };
        // A `struct in_addr`: four bytes in network order.
        let mut addr = [0u8; 4];
        // SAFETY: MUNGE_OPT_ADDR4 takes a `struct in_addr *`, four writable bytes; after a
        // successful decode the context holds the credential's address.
        let rc = unsafe { (self.lib.ctx_get)(ctx.ctx, MUNGE_OPT_ADDR4, addr.as_mut_ptr()) };
        ctx.check(rc)?;
        Ok(Decoded {
            uid,
            gid,
            payload,
            origin: std::net::Ipv4Addr::from(addr),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_says_which_package_to_install() {
        let Err(e) = Lib::load(c"libmunge-not-here.so.2") else {
            panic!("loaded a library that does not exist")
        };
        assert_eq!(e.code(), "library");
        let text = e.to_string();
        assert!(
            text.contains("install Debian's libmunge2 package"),
            "{text}"
        );
        assert!(text.contains("libmunge-not-here.so.2"), "{text}");
    }
}
