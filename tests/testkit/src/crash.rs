//! The crash harness: a test's child process is the test binary itself, re-run with one ignored
//! test selected, and the parent kills it with SIGKILL at a moment of its choosing.

use std::fmt::{Debug, Display};
use std::process::{Child, Command, ExitStatus};
use std::str::FromStr;

/// This test binary re-run with only the ignored test `name` of `module` selected (pass
/// `module_path!()`: the test's path inside its binary follows from it). The child's test
/// returns at once unless the parent set the variables it reads.
pub fn child_process(module: &str, name: &str) -> Command {
    let test = match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    };
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command.args([
        test.as_str(),
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// SIGKILL, then wait for the process to be gone.
pub fn sigkill(child: &mut Child) -> ExitStatus {
    // SAFETY: plain syscall on a child pid we own (not yet reaped: `wait` below reaps it).
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill child");
    child.wait().expect("reap the killed child")
}

/// Items (session ids, say) as one environment variable's value for the child.
pub fn join_list<T: Display>(items: &[T]) -> String {
    items.iter().map(T::to_string).collect::<Vec<_>>().join(",")
}

/// The child's side of [`join_list`].
pub fn split_list<T: FromStr>(text: &str) -> Vec<T>
where
    T::Err: Debug,
{
    text.split(',')
        .map(|item| item.parse().expect("a list item"))
        .collect()
}

/// The child's runtime: two worker threads, as the parent's tests run.
pub fn child_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the child's runtime")
}
