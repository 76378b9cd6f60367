#!/bin/bash
# Single-machine SLURM test cluster: munged, a private MariaDB, slurmdbd, slurmctld and slurmd,
# started without systemd. Usage: local-slurm.sh up|down|status|purge
#
# Knobs (environment):
#   LOCAL_SLURM_DIR              state, logs, pid files, DB datadir   (default /tmp/local-slurm)
#   LOCAL_SLURM_ACCOUNTING       dbd (slurmdbd + MariaDB, sacct works) | none   (default dbd)
#   LOCAL_SLURM_CPUS             CPUs the node advertises             (default 8)
#   LOCAL_SLURM_EPILOG           Epilog script: absolute path, none, or unset for the env-dump default
#   LOCAL_SLURM_EPILOG_SLURMCTLD EpilogSlurmctld script: same rules
#   LOCAL_SLURM_READY_TIMEOUT    seconds to wait for each daemon / the idle node   (default 90)
set -euo pipefail

D=${LOCAL_SLURM_DIR:-/tmp/local-slurm}
ACCOUNTING=${LOCAL_SLURM_ACCOUNTING:-dbd}
CPUS=${LOCAL_SLURM_CPUS:-8}
READY_TIMEOUT=${LOCAL_SLURM_READY_TIMEOUT:-90}
CONF_DIR=/etc/slurm
SLURM_CONF_FILE=$CONF_DIR/slurm.conf
DBD_CONF_FILE=$CONF_DIR/slurmdbd.conf
NODE=$(hostname -s)
MYSQL_SOCK=$D/mysql-run/mysqld.sock
MYSQL_PID=$D/mysql-run/mysqld.pid
MUNGE_PID=/run/munge/munged.pid
# Daemons get a clean environment: hooks and triggers inherit slurmctld's environment.
CLEAN_ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root)

log() { printf '[local-slurm] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

case $ACCOUNTING in dbd | none) ;; *) die "LOCAL_SLURM_ACCOUNTING must be dbd or none, not '$ACCOUNTING'" ;; esac
[[ $CPUS =~ ^[1-9][0-9]*$ ]] || die "LOCAL_SLURM_CPUS must be a positive integer"
[[ $READY_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "LOCAL_SLURM_READY_TIMEOUT must be a positive integer"

# wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
    local limit=$1 what=$2 deadline
    shift 2
    deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what"
        sleep 0.2
    done
}

# read_pid PIDFILE: the number in PIDFILE, or nothing (the daemon may remove it at any moment).
read_pid() { { tr -dc '0-9' <"$1"; } 2>/dev/null || true; }

# pid_alive PIDFILE COMM: the pid file names a running, non-zombie process called COMM.
# (PID 1 here reaps orphans late, so a stopped daemon can linger as a zombie.)
pid_alive() {
    local pidfile=$1 comm=$2 pid state
    pid=$(read_pid "$pidfile")
    [[ -n $pid && -r /proc/$pid/stat ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || return 1
    state=$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ $state != Z && $state != X ]]
}

# stop_pid PIDFILE COMM GRACE: SIGTERM, wait up to GRACE seconds, then SIGKILL.
stop_pid() {
    local pidfile=$1 comm=$2 grace=$3 pid deadline
    pid_alive "$pidfile" "$comm" || return 0
    pid=$(read_pid "$pidfile")
    [[ -n $pid ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + grace))
    while pid_alive "$pidfile" "$comm"; do
        if ((SECONDS >= deadline)); then
            log "$comm ($pid) ignored SIGTERM for ${grace}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    log "stopped $comm"
}

# ---------------------------------------------------------------- packages
install_packages() {
    local wanted=(slurm-wlm munge) missing=() p made_policy=0
    [[ $ACCOUNTING == dbd ]] && wanted+=(slurmdbd mariadb-server)
    for p in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    log "installing ${missing[*]}"
    # Keep postinst scripts from starting daemons; remove only a policy file we created.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    local rc=0
    {
        apt-get update -q &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    } </dev/null >"$D/log/apt.log" 2>&1 || rc=$?
    ((made_policy)) && rm -f /usr/sbin/policy-rc.d
    ((rc == 0)) || die "apt-get failed (rc=$rc), see $D/log/apt.log"
}

# ---------------------------------------------------------------- configs
hook_script() { # hook_script NAME: the default hook, which dumps its environment and always exits 0
    cat <<EOF
#!/bin/bash
# local-slurm default $1 hook: record the environment. Must exit 0: a failing Epilog drains the node.
{ echo "# $1 args: \$*  uid=\$(id -u) date=\$(date +%FT%T.%N)"; env | sort; } \\
  > "$D/hooks-out/$1-\${SLURM_JOB_ID:-\${1:-unknown}}.env" 2>&1
exit 0
EOF
}

# hook_path KNOB_VALUE NAME: the path to put in slurm.conf, or nothing for "none".
hook_path() {
    local value=$1 name=$2
    case $value in
        none) ;;
        "") echo "$D/hooks/$name.sh" ;;
        /*) echo "$value" ;;
        *) die "hook paths must be absolute or 'none', got '$value'" ;;
    esac
}

render_slurm_conf() {
    local topo mem_kb real_mem epilog ctld_epilog
    # Board/socket/core counts from slurmd -C; then override CPUs to the advertised count.
    topo=$(slurmd -C 2>/dev/null | head -n1 | grep -oE '(Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' | tr '\n' ' ')
    mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    real_mem=$((mem_kb * 85 / 100 / 1024))
    if ((CPUS != $(nproc))); then
        # Advertise CPUS as one socket of CPUS cores (config_overrides lets slurmd accept it).
        topo="Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1"
    fi
    epilog=$(hook_path "${LOCAL_SLURM_EPILOG:-}" epilog)
    ctld_epilog=$(hook_path "${LOCAL_SLURM_EPILOG_SLURMCTLD:-}" epilog_slurmctld)
    cat <<EOF
# generated by tests/slurm/local-slurm.sh -- single-node test cluster, do not edit by hand
ClusterName=local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$D/ctld
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# plain /proc process tracking: this VM mixes cgroup v1 and v2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MailProg=/bin/true
EOF
    if [[ $ACCOUNTING == dbd ]]; then
        cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
EOF
    else
        cat <<EOF
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.txt
EOF
    fi
    [[ -n $epilog ]] && echo "Epilog=$epilog"
    [[ -n $ctld_epilog ]] && echo "EpilogSlurmctld=$ctld_epilog"
    cat <<EOF
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmctldTimeout=60
SlurmdTimeout=60
Waittime=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS $topo RealMemory=$real_mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

render_dbd_conf() {
    cat <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$D/log/slurmdbd.log
PidFile=$D/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3307
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOF
}

# write_configs: write hooks, slurm.conf and slurmdbd.conf. When slurm.conf's content changes while
# slurmctld runs, restart slurmctld and slurmd (EpilogSlurmctld needs a real restart, and a topology
# change requeues running jobs, so refuse while jobs run; nothing is written then).
write_configs() {
    local new name
    mkdir -p "$CONF_DIR"
    new=$(render_slurm_conf)
    if [[ ! -f $SLURM_CONF_FILE ]] || [[ $new != "$(cat "$SLURM_CONF_FILE")" ]]; then
        if pid_alive "$D/run/slurmctld.pid" slurmctld; then
            jobs_running && die "slurm.conf would change but jobs are running; run 'down' first"
            log "slurm.conf changed: restarting slurmd and slurmctld"
            stop_pid "$D/run/slurmd.pid" slurmd 20
            stop_pid "$D/run/slurmctld.pid" slurmctld 20
        fi
        printf '%s\n' "$new" >"$SLURM_CONF_FILE"
    fi
    for name in epilog epilog_slurmctld; do
        hook_script "$name" >"$D/hooks/$name.sh"
        chmod 755 "$D/hooks/$name.sh"
    done
    if [[ $ACCOUNTING == dbd ]]; then
        (
            umask 077
            render_dbd_conf >"$DBD_CONF_FILE"
        )
        chown root:root "$DBD_CONF_FILE"
        chmod 600 "$DBD_CONF_FILE"
    fi
}

jobs_running() { [[ -n $(squeue -h -t RUNNING,COMPLETING,SUSPENDED -o %i 2>/dev/null) ]]; }

# ---------------------------------------------------------------- daemons
start_munge() {
    [[ -s /etc/munge/munge.key ]] || mungekey --create >/dev/null 2>&1 || die "cannot create munge key"
    if ! pid_alive "$MUNGE_PID" munged; then
        mkdir -p /run/munge /var/log/munge /var/lib/munge
        chown munge:munge /run/munge /var/log/munge /var/lib/munge
        "${CLEAN_ENV[@]}" runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 ||
            die "munged failed to start (see /var/log/munge/munged.log)"
        log "started munged"
    fi
    wait_for "$READY_TIMEOUT" munge sh -c 'munge -n | unmunge'
}

start_mariadb() {
    mkdir -p "$D/mysql" "$D/mysql-run"
    chown mysql:mysql "$D/mysql" "$D/mysql-run"
    if [[ ! -d $D/mysql/mysql ]]; then
        mariadb-install-db --no-defaults --user=mysql --datadir="$D/mysql" \
            --auth-root-authentication-method=socket --skip-test-db </dev/null >"$D/log/mariadb-install.log" 2>&1 ||
            die "mariadb-install-db failed, see $D/log/mariadb-install.log"
    fi
    if ! pid_alive "$MYSQL_PID" mariadbd; then
        # mariadbd does not daemonize: detach it into its own session with no inherited stdio.
        "${CLEAN_ENV[@]}" setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$D/mysql" \
            --socket="$MYSQL_SOCK" --port=3307 --bind-address=127.0.0.1 \
            --pid-file="$MYSQL_PID" --log-error="$D/mysql-run/mariadb.err" \
            --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 &
        log "started mariadbd"
    fi
    wait_for "$READY_TIMEOUT" "MariaDB on $MYSQL_SOCK" mariadb-admin --no-defaults -S "$MYSQL_SOCK" ping
    mariadb --no-defaults -S "$MYSQL_SOCK" -u root -e "
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
        FLUSH PRIVILEGES;" </dev/null || die "cannot create the slurm DB user"
}

start_slurmdbd() {
    if ! pid_alive "$D/run/slurmdbd.pid" slurmdbd; then
        "${CLEAN_ENV[@]}" /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1 || die "slurmdbd failed, see $D/log/slurmdbd.log"
        log "started slurmdbd"
    fi
    wait_for "$READY_TIMEOUT" slurmdbd sacctmgr -n -P list cluster format=Cluster
}

start_slurmctld() {
    if ! pid_alive "$D/run/slurmctld.pid" slurmctld; then
        "${CLEAN_ENV[@]}" /usr/sbin/slurmctld </dev/null >/dev/null 2>&1 || die "slurmctld failed, see $D/log/slurmctld.log"
        log "started slurmctld"
    fi
    wait_for "$READY_TIMEOUT" slurmctld sh -c 'scontrol ping | grep -q UP'
}

start_slurmd() {
    if ! pid_alive "$D/run/slurmd.pid" slurmd; then
        "${CLEAN_ENV[@]}" /usr/sbin/slurmd -N "$NODE" </dev/null >/dev/null 2>&1 || die "slurmd failed, see $D/log/slurmd.log"
        log "started slurmd"
    fi
}

node_state() { sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n1; }

wait_node_idle() {
    local deadline=$((SECONDS + READY_TIMEOUT)) state
    while :; do
        state=$(node_state)
        case $state in
            idle | mixed | allocated) return 0 ;;
            drain* | down* | fail*)
                log "node is $state; resuming it"
                scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
                ;;
        esac
        ((SECONDS < deadline)) || die "node $NODE not idle after ${READY_TIMEOUT}s (state '${state:-?}')"
        sleep 0.2
    done
}

# ---------------------------------------------------------------- commands
cmd_up() {
    mkdir -p "$D"/{ctld,spool,run,log,hooks,hooks-out}
    install_packages
    write_configs
    start_munge
    if [[ $ACCOUNTING == dbd ]]; then
        start_mariadb
        start_slurmdbd
    fi
    start_slurmctld
    start_slurmd
    wait_node_idle
    log "up: node $NODE $(node_state), accounting=$ACCOUNTING, cpus=$CPUS, dir=$D"
}

cmd_down() {
    if pid_alive "$D/run/slurmctld.pid" slurmctld; then
        if [[ -n $(squeue -h -o %i 2>/dev/null) ]]; then
            log "cancelling jobs"
            scancel --full --user=root >/dev/null 2>&1 || true
            scancel --full --state=PENDING >/dev/null 2>&1 || true
            local deadline=$((SECONDS + 60))
            while [[ -n $(squeue -h -o %i 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.2; done
        fi
    fi
    stop_pid "$D/run/slurmd.pid" slurmd 20
    stop_pid "$D/run/slurmctld.pid" slurmctld 20
    stop_pid "$D/run/slurmdbd.pid" slurmdbd 20
    stop_pid "$MYSQL_PID" mariadbd 60
    stop_pid "$MUNGE_PID" munged 20
    log "down"
}

cmd_status() {
    local name pidfile comm rc=0 state
    for name in munged:$MUNGE_PID mariadbd:$MYSQL_PID slurmdbd:$D/run/slurmdbd.pid \
        slurmctld:$D/run/slurmctld.pid slurmd:$D/run/slurmd.pid; do
        comm=${name%%:*} pidfile=${name#*:}
        if pid_alive "$pidfile" "$comm"; then
            echo "$comm: running (pid $(read_pid "$pidfile"))"
        else
            echo "$comm: stopped"
        fi
    done
    state=$(node_state || true)
    echo "node $NODE: ${state:-unknown}"
    case $state in idle | mixed | allocated) ;; *) rc=3 ;; esac
    return "$rc"
}

cmd_purge() {
    cmd_down
    rm -rf "$D"
    log "purged $D"
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    purge) cmd_purge ;;
    *)
        echo "usage: $0 up|down|status|purge" >&2
        exit 2
        ;;
esac
