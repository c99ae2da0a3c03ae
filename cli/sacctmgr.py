"""`sacctmgr`: accounts, users and their limits as Slurm 22.05's sacctmgr reads and prints them.

    sacctmgr [-i] [-n] [-p|-P] [-s] show|list account|user|assoc|qos|tres [SPECS] [where SPECS] [format=F,...]
    sacctmgr [-i] add account NAME [Parent=P] [Fairshare=N] [GrpTRES=...] [MaxJobs=N] ...
    sacctmgr [-i] add user NAME Account=A [DefaultAccount=A] [Fairshare=N] ...
    sacctmgr [-i] modify account|user NAME [where ...] set KEY=VALUE ...   (QOS+=, QOS-=)
    sacctmgr [-i] delete account|user NAME [where account=A]

The client only maps words: it reads the tree (`GET /v1/accounts?slurm=1`) and sends one
change (`POST /v1/accounts/modify`), which the daemon validates, audits and refuses to
non-administrators, as for `batchd account`. Layouts, messages and exit codes are those
recorded from Slurm 22.05 (tests/cli/golden/sacctmgr/README.md). QOS are defined in
batchd.toml: `add|modify|delete qos` are refused.

Mapping: Share = shares; GrpTRES = each resource's `limit` (the quota when no limit is set)
on an account, `max_tres_per_user` on a user's association; GrpTRESMins/GrpTRESRunMins =
`grp_tres_mins`/`grp_tres_run_mins`; MaxJobs, MaxSubmit(Jobs), MaxTRES, QOS, Def QOS =
`max_jobs`, `max_submit_jobs`, `max_tres_per_job`, `qos`, `default_qos` (inherited down
the tree as Slurm shows them); MaxTRESPerUser = `max_tres_per_user`.

Startup must stay fast: no click, no sqlalchemy here.
"""

import sys

from batchd.cli.sacctmgr_view import (
    ENTITIES,
    FIELDS,
    UsageError,
    parse_specs,
    render,
    rows_for,
    tres_text,
)

PROG = "sacctmgr"
HELP = """\
sacctmgr [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -h or --help: equivalent to "help" command
     -i or --immediate: commit changes immediately
     -n or --noheader: no header will be added to the beginning of output
     -o or --oneliner: equivalent to "oneliner" command (ignored)
     -p or --parsable: output will be '|' delimited with a '|' at the end
     -P or --parsable2: output will be '|' delimited without a '|' at the end
     -Q or --quiet: print no messages other than error messages
     -s or --associations: list the associations of the entity
     -V or --version: display tool version number

  Valid <COMMAND> values: add, delete, list|show, modify <ENTITY> <SPECS>
  <ENTITY>: account, user, association, qos, tres (qos and tres are read-only in batchd:
  QOS are defined in batchd.toml)
"""
NO_ENTITY = ('No valid entity in {verb} command\n'
             'Input line must include "Account", "Association", "Cluster", "Configuration",\n'
             '"Event", "Federation", "Problem", "QOS", "Resource", "Reservation",\n'
             '"RunAwayJobs", "Stats", "Transaction", "TRES", "User", or "WCKey"\n')
DENIED = ("sacctmgr: error: Your user doesn't have privilege to perform this action\n"
          " Error with request: Access/permission denied\n")
QOS_REFUSED = ("sacctmgr: error: QOS are defined in batchd.toml ([[qos]]) in batchd, not in the database:"
               " edit the file and restart the daemon\n")

VERBS = {"show": "list", "list": "list", "add": "add", "create": "add", "modify": "modify", "update": "modify",
         "delete": "delete", "remove": "delete"}


def _out(text):
    from batchd.cli.fmt import write

    write(text)


def _err(text, rc=1):
    sys.stderr.write(text)
    return rc


def _call(method, path, body=None, query=None):
    """The daemon's reply; DaemonError and Unreachable are left to the caller."""
    from batchd.cli import client

    return client.request(method, path, body, query)


def _state():
    return _call("GET", "/v1/accounts", query={"slurm": "1"})


def _confirm(immediate):
    """Slurm's commit prompt; True to commit. A closed stdin reads as no (Slurm 22.05 loops
    on it printing `Y or N please` forever)."""
    if immediate:
        return True
    sys.stdout.write("Would you like to commit changes? (You have 30 seconds to decide)\n(N/y): ")
    sys.stdout.flush()
    import select

    ready, _, _ = select.select([sys.stdin], [], [], 30)
    answer = sys.stdin.readline() if ready else ""
    sys.stdout.write("\n")
    if answer.strip().lower().startswith("y"):
        return True
    sys.stdout.write(" Changes Discarded\n")
    return False


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    flags = {"i": False, "n": False, "p": "", "s": False, "Q": False}
    words = []
    for a in argv:
        if a.startswith("--"):
            long = {"--immediate": "i", "--noheader": "n", "--parsable": "p", "--parsable2": "P",
                    "--associations": "s", "--quiet": "Q", "--oneliner": "o", "--help": "h", "--version": "V",
                    "--readonly": "r", "--verbose": "v"}.get(a)
            if long is None:
                return _err(f"sacctmgr: unrecognized option '{a}'\nTry \"sacctmgr --help\" for more information\n")
            letters = long
        elif a.startswith("-") and len(a) > 1 and not words:
            letters = a[1:]
        else:
            words.append(a)
            continue
        for ch in letters:
            if ch in "pP":
                flags["p"] = ch
            elif ch in "insQ":
                flags[ch] = True
            elif ch == "h":
                _out(HELP)
                return 0
            elif ch == "V":
                _out("slurm 22.05.8 (batchd)\n")
                return 0
            elif ch not in "orv":
                return _err(f"sacctmgr: invalid option -- '{ch}'\nTry \"sacctmgr --help\" for more information\n")
    if not words or words[0].lower() == "help":
        _out(HELP)
        return 0
    verb = VERBS.get(words[0].lower())
    if verb is None:
        return _err(f"invalid keyword: {words[0]}\n")
    if words[1:2] and words[1].lower() in ("withassoc", "associations"):
        flags["s"] = True
        words = [words[0], *words[2:]]
    entity = ENTITIES.get(words[1].lower()) if len(words) > 1 else None
    if entity is None:
        return _err(NO_ENTITY.format(verb=verb))
    from batchd.cli import client

    if entity in ("qos", "tres") and verb != "list":
        return _err(QOS_REFUSED if entity == "qos" else "sacctmgr: error: TRES are not managed by sacctmgr\n")
    try:
        specs = parse_specs(words[2:])
        if verb == "list":
            return _show(entity, specs, flags)
        from batchd.cli import sacctmgr_change as change

        return change.run(verb, entity, specs, flags, _state, _call, _confirm, _out)
    except UsageError as e:
        return _err(e.text)
    except client.Unreachable as e:
        return _err(f"sacctmgr: error: {e}\n")
    except client.DaemonError as e:
        if e.status == 403:
            return _err(DENIED)
        return _err(f"sacctmgr: error: {e.message}\n")


def _show(entity, specs, flags):
    state = _state()
    with_assoc = flags["s"] or specs.with_assoc
    kind = entity + ("+assoc" if with_assoc and entity in ("account", "user") else "")
    rows = rows_for(kind, state, specs)
    fields = specs.format or FIELDS[kind]["default"]
    _out(render(kind, fields, rows, flags["p"], not flags["n"]))
    return 0


__all__ = ["main", "tres_text"]

if __name__ == "__main__":
    sys.exit(main())
