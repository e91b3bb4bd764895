"""Every host-side touch of data that a sandbox or a run folder produced, which is hostile.

* `names`: workspace-relative names validated; names shown escaped and short.
* `tree`: a workspace directory walked, read, written and removed with O_NOFOLLOW descents,
  bounded in depth and entries; bounded copies.
* `archive`: tars made from a workspace, and tars extracted onto the host safely.
* `text`: text from a sandbox or a record made safe for a terminal.
* `exits`: the one exit policy: what of a sandbox's files may leave for the host, at every exit
  (no VCS metadata or planted repository, no hook, special file or link out of the tree).

Helpers take the owner uid as an argument: nothing here asks whether the host runs as root.
"""
