"""The queue database's tables, and the columns added to them since the first release.

Written once for SQLite and PostgreSQL; {id} and {blob} are the types dialect.py gives each.

LATER_INDEXES are made after the MIGRATIONS, on columns those add; entries_ready is claim.py's
(written there, next to the query that must match it).

Queue (db.py) creates what is missing and adds the MIGRATIONS columns to a database made by
an older vmjudge, so a home keeps working across upgrades.
"""

from .claim import INDEX

SCHEMA = """
CREATE TABLE IF NOT EXISTS challenges (
    name TEXT PRIMARY KEY,
    directory TEXT NOT NULL,
    image_key TEXT NOT NULL,
    registered_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    id {id},
    challenge TEXT NOT NULL REFERENCES challenges(name),
    owner TEXT NOT NULL,
    late INTEGER NOT NULL DEFAULT 0,
    dry_run INTEGER NOT NULL DEFAULT 0,  -- the archive holds DRYRUN: it can never be scored
    archive_sha256 TEXT NOT NULL,
    archive_name TEXT NOT NULL,
    archive_path TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    state TEXT NOT NULL,               -- queued | running | done | parked
    stage TEXT,                        -- the stage queued or running; NULL once done
    lease_owner TEXT,
    not_before DOUBLE PRECISION NOT NULL DEFAULT 0,  -- a retried stage waits until this time (epoch seconds)
    outcome TEXT,                      -- scored | dry-run | failed
    failed_stage TEXT,
    reason TEXT,
    scores TEXT,                       -- JSON object
    exam TEXT,                         -- JSON object: records, completed, failed, timed_out
    finished_at TEXT
);
CREATE TABLE IF NOT EXISTS stage_runs (
    id {id},
    entry_id INTEGER NOT NULL REFERENCES entries(id),
    stage TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    host TEXT NOT NULL,
    slot INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT,                       -- passed | failed | dry-run | scored | infra | cancelled
    reason TEXT,
    message TEXT,                      -- what the participant sees of this stage
    manifest TEXT                      -- JSON: what produced this result
);
CREATE TABLE IF NOT EXISTS events (
    id {id},
    entry_id INTEGER,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS exam_results (  -- stage 3's results of an entry, kept for (re)scoring
    id {id},
    entry_id INTEGER NOT NULL REFERENCES entries(id),
    run_id INTEGER REFERENCES stage_runs(id),  -- the exam run that produced them
    sha256 TEXT NOT NULL,              -- the blob in HOME/archive/sha256/
    manifest TEXT NOT NULL,            -- JSON: the exam's manifest (image, agent, entry sha256...)
    archived_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS scorings (  -- every score an entry was given, oldest first
    id {id},
    entry_id INTEGER NOT NULL REFERENCES entries(id),
    at TEXT NOT NULL,
    why TEXT NOT NULL,                 -- official | rescore
    scorer TEXT NOT NULL,
    scorer_version TEXT NOT NULL,
    reference_sha256 TEXT NOT NULL,
    results_sha256 TEXT NOT NULL,
    scores TEXT NOT NULL               -- JSON object
);
CREATE TABLE IF NOT EXISTS gpu_slots (  -- each host's GPUs, one VM slot each, and whether it is lent
    host TEXT NOT NULL,
    address TEXT NOT NULL,             -- the PCI address, as site.toml [gpu] devices
    in_service INTEGER NOT NULL DEFAULT 1,
    reason TEXT,                       -- why it was taken out of service
    changed_at TEXT NOT NULL,
    PRIMARY KEY (host, address)
);
CREATE TABLE IF NOT EXISTS hosts (  -- each daemon sharing the queue, and when it last said it lives
    name TEXT PRIMARY KEY,             -- site.toml [queue] host
    machine TEXT NOT NULL,             -- /etc/machine-id: two machines given one name are refused
    pid INTEGER NOT NULL,
    slots INTEGER NOT NULL,
    gpu_slots INTEGER NOT NULL,
    busy INTEGER NOT NULL DEFAULT 0,   -- slots running a stage at the last heartbeat
    started_at TEXT NOT NULL,
    heartbeat DOUBLE PRECISION NOT NULL,  -- epoch seconds of the last heartbeat
    stopped INTEGER NOT NULL DEFAULT 0  -- 1 once the daemon stopped on purpose
);
CREATE TABLE IF NOT EXISTS challenge_copies (  -- where a host other than the registering one keeps a challenge
    host TEXT NOT NULL,
    name TEXT NOT NULL,
    directory TEXT NOT NULL,
    PRIMARY KEY (host, name)
);
CREATE TABLE IF NOT EXISTS blobs (  -- archives and results, content-addressed, when no file is shared
    sha256 TEXT PRIMARY KEY,
    size BIGINT NOT NULL,
    parts INTEGER NOT NULL,            -- written last: a blob listed here is whole
    added_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS data_disks (  -- data disks kept in the object store (shared_disks.py)
    key TEXT PRIMARY KEY,              -- the record set's content key (images/data_disk.py)
    sha256 TEXT NOT NULL,              -- the disk's own bytes: its object's name
    size BIGINT NOT NULL,
    added_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS blob_parts (
    sha256 TEXT NOT NULL,
    part INTEGER NOT NULL,
    data {blob} NOT NULL,
    PRIMARY KEY (sha256, part)
);
CREATE TABLE IF NOT EXISTS owner_usage (  -- VM seconds charged to each owner, by the hour runs started in
    owner TEXT NOT NULL,
    hour BIGINT NOT NULL,              -- epoch seconds // 3600
    seconds DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (owner, hour)
);
CREATE INDEX IF NOT EXISTS owner_usage_hour ON owner_usage(hour);
CREATE INDEX IF NOT EXISTS entries_state ON entries(state, id);
-- A claim looks only at queued entries, and counts the entry's runs of the stage it starts
-- (bench/queue_bench.py: without them a claim's cost grew with the queue's history).
CREATE INDEX IF NOT EXISTS entries_queued ON entries(id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS stage_runs_entry ON stage_runs(entry_id, stage);
CREATE INDEX IF NOT EXISTS exam_results_entry ON exam_results(entry_id, id);
CREATE INDEX IF NOT EXISTS scorings_entry ON scorings(entry_id, id);
-- The portal's uploads that were refused or failed, kept an hour: each owner may have only so many.
CREATE TABLE IF NOT EXISTS failed_uploads (
    owner TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,      -- epoch seconds
    status INTEGER NOT NULL            -- the HTTP status the upload got
);
CREATE INDEX IF NOT EXISTS failed_uploads_owner ON failed_uploads(owner, at);
-- The participants' portal (vmjudge web): who may sign in, by the sha256 of a token shown once.
CREATE TABLE IF NOT EXISTS owners (
    name TEXT PRIMARY KEY,             -- the owner entries are submitted as
    token_sha256 TEXT NOT NULL UNIQUE,
    organiser INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    revoked_at TEXT                    -- set by `owner revoke`: the token and its sessions stop at once
);
-- Teams (issue 58): a team is an owner that never signs in (owners.awaiting = 'team'), so its
-- entries, limits, budgets and board row are an owner's; its members, one team each per challenge,
-- submit as it. `invite` is the nonce its invitation link signs: a new one stops the old link.
CREATE TABLE IF NOT EXISTS teams (
    challenge TEXT NOT NULL,
    name TEXT NOT NULL UNIQUE,         -- the owner its entries are submitted as
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    invite TEXT NOT NULL,
    PRIMARY KEY (challenge, name)
);
CREATE TABLE IF NOT EXISTS team_members (
    challenge TEXT NOT NULL,
    owner TEXT NOT NULL,
    team TEXT NOT NULL,
    joined_at TEXT NOT NULL,
    PRIMARY KEY (challenge, owner)
);
-- A contest's phases (challenge.toml [[phase]], issue 40): the owners the organiser promoted into
-- a phase, and when a phase's results were published to participants. Both are the organiser's
-- acts, recorded with who did them and when.
CREATE TABLE IF NOT EXISTS promotions (
    challenge TEXT NOT NULL,
    phase TEXT NOT NULL,
    owner TEXT NOT NULL,
    place INTEGER,                     -- the owner's rank on the board promoted from; NULL: chosen by name
    how TEXT NOT NULL,                 -- "top 15 of validation" or "chosen"
    promoted_by TEXT NOT NULL,
    promoted_at TEXT NOT NULL,
    PRIMARY KEY (challenge, phase, owner)
);
CREATE TABLE IF NOT EXISTS publications (
    challenge TEXT NOT NULL,
    phase TEXT NOT NULL,
    published_by TEXT NOT NULL,
    published_at TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,      -- epoch seconds: participants see the phase in full from then
    PRIMARY KEY (challenge, phase)
);
-- Notifications (issue 35, outbox.py): each written in the transaction of the event that causes
-- it, sent by one daemon's sender, tried again with backoff, then failed for `notify list`.
CREATE TABLE IF NOT EXISTS outbox (
    id {id},
    kind TEXT NOT NULL,                -- entry-judged | entry-parked | gpu-out | host-down | ... | digest
    audience TEXT NOT NULL,            -- owner (the entry's, by the email it gave) | organisers
    owner TEXT,
    entry_id BIGINT,
    evaluation INTEGER,                -- the entry's evaluation it tells of
    condition TEXT,                    -- organisers: told at most once an hour, then in a digest
    subject TEXT,                      -- organisers' messages: written with the event; an owner's
    body TEXT,                         -- is built when sent, from the participant view
    events INTEGER NOT NULL DEFAULT 1,
    created DOUBLE PRECISION NOT NULL,  -- epoch seconds
    not_before DOUBLE PRECISION NOT NULL,  -- an owner's: the entry's publish time
    state TEXT NOT NULL DEFAULT 'pending',  -- pending | sent | failed | dropped
    tries INTEGER NOT NULL DEFAULT 0,
    next_try DOUBLE PRECISION NOT NULL,
    claimed_by TEXT,                   -- the host sending it, until claim_until
    claim_until DOUBLE PRECISION,
    delivered TEXT NOT NULL DEFAULT '[]',  -- JSON: the addresses it reached; a retry skips them
    last_error TEXT,
    finished DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox(state, next_try);
CREATE INDEX IF NOT EXISTS outbox_condition ON outbox(audience, condition);
-- An owner's confirmation mails, counted on each address the portal is given (issue 54, owners.py).
CREATE INDEX IF NOT EXISTS outbox_owner ON outbox(owner, kind, created);
CREATE TABLE IF NOT EXISTS notify_conditions (  -- conditions.py: each one's state as last told
    name TEXT PRIMARY KEY,             -- "host judge2", "daemon judge1"
    state TEXT NOT NULL,               -- down | up | stopped | error | running
    changed DOUBLE PRECISION NOT NULL
);
"""
# Columns added after the first release: (table, column, definition) for homes made before.
MIGRATIONS = (
    ("entries", "not_before", "DOUBLE PRECISION NOT NULL DEFAULT 0"),
    ("entries", "evaluation", "INTEGER NOT NULL DEFAULT 1"),  # bumped by `rescore --rerun-stages`
    ("stage_runs", "evaluation", "INTEGER NOT NULL DEFAULT 1"),
    ("entries", "dry_run", "INTEGER NOT NULL DEFAULT 0"),  # entry limits: a DRYRUN archive never counts
    ("challenges", "gpu", "TEXT"),  # challenge.toml [vm] gpu: its VM stages run only in a GPU slot
    # Several hosts (issue 15): the claim's stage run and until when it holds (renewed by the
    # holder's heartbeat); the host that holds the entry's post-setup home disk.
    ("entries", "lease_run", "BIGINT"),
    ("entries", "lease_until", "DOUBLE PRECISION"),
    ("entries", "home_host", "TEXT"),
    # What every host must have the same of to judge the challenge: its files (JSON: part ->
    # sha256) and the sha256 of its image's manifest.json.
    ("challenges", "data_sha256", "TEXT"),
    ("challenges", "image_sha256", "TEXT"),
    # Fair share and budgets (issue 20): when each stage run started (epoch seconds) and the VM
    # time it is charged (VM stages that ended with the entry's verdict; never infrastructure
    # failures); entries the organiser queued again in a batch (rescore --rerun-stages).
    ("stage_runs", "started", "DOUBLE PRECISION"),
    ("stage_runs", "vm_seconds", "DOUBLE PRECISION"),
    ("entries", "batch", "INTEGER NOT NULL DEFAULT 0"),
    # What a VM stage's run used (JSON, stages/figures.py): per command and for the VM. Whole for
    # organisers; reports/figures.py gives participants what they may see of it.
    ("stage_runs", "figures", "TEXT"),
    # What participants may see of the exam (publish.py): when the evaluation's first exam run
    # started (epoch seconds), and from when its result may be shown (set when the entry ends).
    ("entries", "exam_started", "DOUBLE PRECISION"),
    ("entries", "published", "DOUBLE PRECISION"),
    # The portal (issue 31): when the owner last signed out (epoch seconds); sessions signed in
    # before it are over, whatever their cookie says.
    ("owners", "signed_out_at", "DOUBLE PRECISION"),
    # The archive's size, for the portal's cap on the bytes an owner keeps in the spool.
    ("entries", "archive_bytes", "BIGINT NOT NULL DEFAULT 0"),
    # Issue 30: a stage run of the organiser's batch work (an entry queued again by `rescore
    # --rerun-stages`): its VM time is recorded but never charged to the entry's owner.
    ("stage_runs", "organiser", "INTEGER NOT NULL DEFAULT 0"),
    # Issue 40: the contest phase an entry belongs to (NULL: a challenge without phases), and the
    # entry it was carried from (the same archive, judged again on this phase's data).
    ("entries", "phase", "TEXT"),
    ("entries", "carried_from", "BIGINT"),
    # Its phase keeps scores and the exam's time back until published (feedback "errors" or "none"):
    # its outcome waits for the exam's cap, so when it appears says nothing of the exam's time.
    ("entries", "exam_time_hidden", "INTEGER NOT NULL DEFAULT 0"),
    # Issue 35: the address an owner gave to hear of its entries (`vmjudge owner add|set --email`).
    ("owners", "email", "TEXT"),
    # Issue 54: when the owner's address was confirmed (epoch seconds: its link followed, or the
    # organiser typed it); NULL: unconfirmed, and sent nothing but its confirmation. A home made
    # before has no record of who set an address, so every address it holds starts unconfirmed.
    ("owners", "email_confirmed_at", "DOUBLE PRECISION"),
    # A confirmation's outbox row: the address it goes to (the link is for that address only).
    ("outbox", "address", "TEXT"),
    # Issue 58: an account a person made on the portal: what it waits for before it signs in ("confirmation"
    # of its address, then the organisers' "approval"; NULL: nothing, as every account made before), when it
    # was made (an unconfirmed one lapses, its name free again), and the newest sign-in link used (each link
    # once, and older ones no more).
    ("owners", "awaiting", "TEXT"),
    ("owners", "signed_up_at", "DOUBLE PRECISION"),
    ("owners", "link_used_at", "DOUBLE PRECISION"),
)
# Indexes on columns MIGRATIONS add, so made after them.
LATER_INDEXES = (INDEX,)
