"""native/files: outputs whole or not at all, streams never replaced, inputs bounded, outputs never inputs."""
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading

import pytest

from native.errors import InputFileError, OutputFileError
from native.files import (OutputLocks, PendingOutput, check_side_file, output_file, read_side_file,
                          refuse_overwriting_inputs, resolve_output, write_bytes, write_json, write_text)
from tests.children import HANG_GUARD_S, TERMINAL_SIGNALS, child, wait_for_line

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLD = b"old content \x00\x01\x02" * 100


def _old(tmp_path, name="out.bin"):
    p = tmp_path / name
    p.write_bytes(OLD)
    return p


def _only(tmp_path, *names):
    assert sorted(os.listdir(tmp_path)) == sorted(names), "a temporary file was left behind"


def test_regular_file_is_replaced_whole(tmp_path):
    p = _old(tmp_path)
    assert write_bytes(p, [b"ab", b"cd"]) == 4
    assert p.read_bytes() == b"abcd"
    _only(tmp_path, "out.bin")


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_failure_or_ctrl_c_mid_write_leaves_the_old_file(tmp_path, exc):
    p = _old(tmp_path)
    with pytest.raises(type(exc)):
        with output_file(p, "wb") as f:
            f.write(b"half of the new")
            raise exc
    assert p.read_bytes() == OLD
    _only(tmp_path, "out.bin")


def test_unserialisable_json_leaves_the_old_file(tmp_path):
    p = _old(tmp_path, "r.json")
    with pytest.raises(TypeError):
        write_json(p, {"x": object()})
    assert p.read_bytes() == OLD


def test_new_file_gets_the_umask_mode_and_old_file_keeps_its_mode(tmp_path):
    p = _old(tmp_path)
    os.chmod(p, 0o640)
    write_bytes(p, b"x")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640
    q = tmp_path / "new.bin"
    write_bytes(q, b"x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(q).st_mode) == 0o666 & ~umask


def test_symlink_is_written_through_and_stays_a_link(tmp_path):
    target = _old(tmp_path, "real.plan")
    link = tmp_path / "link.plan"
    link.symlink_to("real.plan")
    write_bytes(link, b"new plan")
    assert link.is_symlink() and os.readlink(link) == "real.plan"
    assert target.read_bytes() == b"new plan"
    _only(tmp_path, "real.plan", "link.plan")


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to("made.json")
    write_text(link, "{}")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "{}"


def test_fifo_is_streamed_into_or_refused_never_replaced(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    write_bytes(fifo, b"streamed")
    reader.join(HANG_GUARD_S)   # returns when the reader has it; the guard only ends a hang
    assert got == [b"streamed"]
    with pytest.raises(OutputFileError, match="FIFO.*never replaced"):
        with PendingOutput(fifo, "data file"):
            pass
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _only(tmp_path, "out.fifo")


def test_character_device_streams_and_stays_a_device():
    write_bytes("/dev/null", b"x" * 1000)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert resolve_output("/dev/stdout").kind == "stream"
    assert resolve_output("-").kind == "stdout"
    with pytest.raises(OutputFileError, match="character device"):
        resolve_output("/dev/null", "--save-outputs", streamable=False)
    with pytest.raises(OutputFileError, match="stdout"):
        resolve_output("-", "--save-outputs", streamable=False)


def test_directory_and_missing_folder_are_refused(tmp_path):
    with pytest.raises(OutputFileError, match="is a directory"):
        write_bytes(tmp_path, b"x")
    with pytest.raises(OutputFileError, match="directory .* does not exist"):
        write_bytes(tmp_path / "no" / "x.plan", b"x")
    assert not (tmp_path / "no").exists()


_FULL_DISK = textwrap.dedent("""
    import resource, sys
    sys.path.insert(0, {repo!r})
    from native.errors import OutputFileError
    from native.files import write_bytes
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    try:
        write_bytes(sys.argv[1], b"n" * 100000)
    except OutputFileError as e:
        print(e)
        sys.exit(2)
""")


def test_full_disk_is_one_line_and_the_old_file_survives(tmp_path):
    """A file-size limit (RLIMIT_FSIZE) fails the write like a full disk does (EFBIG instead of ENOSPC)."""
    p = _old(tmp_path)
    r = subprocess.run([sys.executable, "-c", _FULL_DISK.format(repo=REPO), str(p)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stdout.strip() == f"could not write {p}: no space left on device (file size limit exceeded); " \
                               f"{p} is unchanged"
    assert p.read_bytes() == OLD
    _only(tmp_path, "out.bin")


_SLOW_WRITER = TERMINAL_SIGNALS + "\n" + textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from native.files import output_file
    with output_file(sys.argv[1], "wb") as f:
        f.write(b"partial")
        f.flush()
        os.write(int(os.environ["TEST_READY_FD"]), b"writing\\n")
        time.sleep(3600)
""")


@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_ctrl_c_in_another_process_leaves_the_old_file(tmp_path, sig):
    """The child says when it is mid-write; Ctrl-C must end it there (it would sleep an hour otherwise)."""
    p = _old(tmp_path)
    with child([sys.executable, "-c", _SLOW_WRITER.format(repo=REPO), str(p)], ready=True,
               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        wait_for_line(proc, "writing")
        assert len(os.listdir(tmp_path)) == 2          # the temporary file exists while writing
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == -sig and "KeyboardInterrupt" in err, (proc.returncode, err)
    assert p.read_bytes() == OLD
    _only(tmp_path, "out.bin")


def test_output_that_is_an_input_is_refused(tmp_path):
    model = _old(tmp_path, "m.onnx")
    (tmp_path / "link.onnx").symlink_to("m.onnx")
    os.link(model, tmp_path / "hard.onnx")
    for out in (model, tmp_path / "link.onnx", tmp_path / "hard.onnx", tmp_path / "." / "m.onnx"):
        with pytest.raises(OutputFileError, match="is also this command's model"):
            refuse_overwriting_inputs([("-o", str(out))], [("model", str(model))])
    refuse_overwriting_inputs([("-o", str(tmp_path / "m.plan"))], [("model", str(model))])
    refuse_overwriting_inputs([("-o", "/dev/null")], [("--load-inputs", "/dev/null")])


_HOLDER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from native.files import OutputLocks
    with OutputLocks([("-o", sys.argv[1])]):
        os.write(int(os.environ["TEST_READY_FD"]), b"locked\\n")
        time.sleep(3600)
""")


def test_a_second_writer_of_the_same_file_is_refused(tmp_path):
    out = tmp_path / "precision.json"
    with child([sys.executable, "-c", _HOLDER.format(repo=REPO), str(out)], ready=True) as proc:
        wait_for_line(proc, "locked")
        with pytest.raises(OutputFileError, match=rf"being written by another debugkit run \(pid {proc.pid}\)"):
            OutputLocks([("-o", str(out))]).acquire()
        with OutputLocks([("-o", str(tmp_path / "other.json"))]):
            pass
    with OutputLocks([("-o", str(out))]):   # free again once the holder is gone
        pass


# --- inputs ------------------------------------------------------------------------------------------------------

def test_side_files_must_be_regular_and_within_their_limit(tmp_path):
    fifo = tmp_path / "cache.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError, match="FIFO"):
        read_side_file(fifo, "timing cache")
    for dev in ("/dev/zero", "/dev/full"):
        with pytest.raises(InputFileError, match="character device"):
            read_side_file(dev, "tactic replay file")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 1)
    with pytest.raises(InputFileError, match=r"67108865 bytes, larger than the 64 MiB \(67108864 bytes\) a calibration cache may be"):
        read_side_file(big, "calibration cache")
    assert check_side_file(big, "timing cache") == (64 << 20) + 1
    with pytest.raises(InputFileError, match="not found"):
        read_side_file(tmp_path / "missing", "timing cache")
    with pytest.raises(InputFileError, match="stdin"):
        read_side_file("-", "timing cache")
    (tmp_path / "ok").write_bytes(b"abc")
    assert read_side_file(tmp_path / "ok", "timing cache") == b"abc"


@pytest.fixture
def terminal_sigint():
    """SIGINT raises KeyboardInterrupt for the test, as in a process started from a terminal, whatever the suite was
    started with (in the background it inherits SIGINT ignored: tests/children.py); restored afterwards."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_signals_are_held_during_a_c_callback_and_delivered_after(terminal_sigint):
    from native.files.signals import signals_deferred
    reached_end = False
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):   # the interpreter runs its handlers here: ours only records
                pass
            reached_end = True
    assert reached_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_signal_stays_ignored_while_held():
    """A process told to ignore SIGINT (started with `&` by a script, nohup) keeps ignoring it inside the block."""
    from native.files.signals import signals_deferred
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with signals_deferred():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
