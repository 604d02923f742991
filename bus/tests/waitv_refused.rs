//! A kernel that will not run `futex_waitv` (before Linux 5.16, or a container's seccomp
//! profile that predates it) makes `SubscriptionGroup::wait_any` fail with an error that says
//! so, instead of retrying at full speed until its timeout. The refusal is simulated with a
//! seccomp filter on the waiting thread alone.

use std::time::{Duration, Instant};

use bus::{Bus, Domain, SubscriptionGroup};

/// Makes `futex_waitv` fail with EPERM on the calling thread (and only there: no TSYNC).
fn refuse_futex_waitv_on_this_thread() {
    const LOAD_SYSCALL_NR: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS, seccomp_data.nr at 0
    const JUMP_IF_EQUAL: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RETURN: u16 = 0x06; // BPF_RET | BPF_K
    let filter = [
        libc::sock_filter {
            code: LOAD_SYSCALL_NR,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: JUMP_IF_EQUAL,
            jt: 0,
            jf: 1,
            k: libc::SYS_futex_waitv as u32,
        },
        libc::sock_filter {
            code: RETURN,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: RETURN,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with integer arguments; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "PR_SET_NO_NEW_PRIVS");
    // SAFETY: `program` points at `filter`, both alive for the call; the kernel copies them.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &program as *const libc::sock_fprog,
        )
    };
    assert_eq!(rc, 0, "PR_SET_SECCOMP: {}", std::io::Error::last_os_error());
}

#[test]
fn a_group_says_when_the_kernel_refuses_futex_waitv() {
    // No registry: the member stays unbound, and the group sleeps on the client's bind word,
    // through futex_waitv all the same.
    let domain = Domain::new(&format!("unit-waitv-{}", std::process::id())).unwrap();
    let bus = Bus::open(domain).unwrap();
    let (result, took) = std::thread::spawn(move || {
        let mut group = SubscriptionGroup::new();
        group.add(bus.subscribe::<u64>("/waitv/x").unwrap());
        refuse_futex_waitv_on_this_thread();
        let start = Instant::now();
        (group.wait_any(Duration::from_secs(3)), start.elapsed())
    })
    .join()
    .unwrap();
    let err = result.expect_err("wait_any must fail, not time out");
    let text = err.to_string();
    assert!(
        text.contains("futex_waitv") && text.contains("Operation not permitted"),
        "{text}"
    );
    assert!(text.contains("5.16") && text.contains("seccomp"), "{text}");
    assert!(took < Duration::from_secs(3), "failed only at the timeout");
}
