"""The files spine: one output module and one input module every reader and writer of side files uses.

    output.py      write outputs whole or not at all (temp + fsync + rename; symlinks written through; devices,
                   FIFOs and stdout streamed or refused; a full disk is one line and the old file is unchanged)
    claims.py      before any work: an output that is also an input is refused; outputs are locked against a
                   concurrent run writing the same file
    side_input.py  read caches, replay files, data files and scripts only when they are regular files within a
                   size limit per kind, checked before reading
    file_kind.py   what a path that is not a regular file is, in words (both modules' refusals)
"""
from native.files.claims import OutputLocks, refuse_overwriting_inputs
from native.files.output import (PendingOutput, append_text, is_stream, output_file, output_path, resolve_output, write_bytes, write_json,
                                 write_text)
from native.files.side_input import check_side_file, read_side_file, read_side_json, read_side_text

__all__ = ["OutputLocks", "refuse_overwriting_inputs", "PendingOutput", "append_text", "is_stream", "output_file", "output_path", "resolve_output",
           "write_bytes", "write_json", "write_text", "check_side_file", "read_side_file", "read_side_json",
           "read_side_text"]
