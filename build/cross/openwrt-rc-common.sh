# A stand-in for OpenWrt's /etc/rc.common + procd + UCI shell API, for the router tests only
# (openwrt-test.sh, openwrt-lifecycle.sh, and the packages' scripts they run): the
# musl root has no procd. It implements just what build/openwrt/edge-runtime.init calls, the way
# OpenWrt documents them: config_load/config_get/config_get_bool read /etc/config/<name>
# ("option key 'value'" lines of one section), procd_* record the instance, and "start" runs its
# command in the background with its environment, as procd would (pid in /var/run/procd-test.pid).
INIT="$1"; ACTION="$2"
CONFIG_FILE=
config_load() { CONFIG_FILE="/etc/config/$1"; }
config_get() { # config_get VAR SECTION OPTION [DEFAULT]
    local value
    value=$(sed -n "s/^[[:space:]]*option[[:space:]]\{1,\}$3[[:space:]]\{1,\}'\{0,1\}\([^']*\)'\{0,1\}[[:space:]]*$/\1/p" "$CONFIG_FILE" | tail -1)
    eval "$1=\${value:-\$4}"
}
config_get_bool() {
    config_get "$@"
    eval "case \"\$$1\" in 1|on|true|yes|enabled) $1=1 ;; *) $1=0 ;; esac"
}
procd_open_instance() { PROCD_COMMAND=; PROCD_ENV=; }
procd_set_param() {
    local key="$1"; shift
    case "$key" in
        command) PROCD_COMMAND="$*" ;;
        env) PROCD_ENV="$*" ;;
    esac
}
procd_append_param() { local key="$1"; shift; [ "$key" = command ] && PROCD_COMMAND="$PROCD_COMMAND $*"; }
procd_close_instance() { :; }
procd_add_reload_trigger() { :; }
enable() { mkdir -p /etc/rc.d && ln -sf "../init.d/${INIT##*/}" "/etc/rc.d/S${START}${INIT##*/}"; }
disable() { rm -f /etc/rc.d/S??"${INIT##*/}"; }
enabled() { [ -e "/etc/rc.d/S${START}${INIT##*/}" ]; }
start() {
    start_service
    echo "procd-test: starting: $PROCD_COMMAND ($PROCD_ENV)"
    # procd: no HOME, almost no environment, stdin from /dev/null, stdout and stderr to the log
    # (logread), never the caller's terminal: the service outlives the script that started it.
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin $PROCD_ENV $PROCD_COMMAND < /dev/null >> /tmp/procd-test.log 2>&1 &
    echo $! > /var/run/procd-test.pid
}
stop() {
    [ -f /var/run/procd-test.pid ] || return 0
    local pid; pid=$(cat /var/run/procd-test.pid)
    kill -TERM "$pid" 2>/dev/null || true
    while [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; do sleep 0.1; done
    rm -f /var/run/procd-test.pid
}
restart() { stop; start; }
. "$INIT"
"$ACTION"
