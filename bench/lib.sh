# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The variables set here are the caller's (SSH_DIR, CREATED_RUN_SSHD, and
# DAEMONS, an associative array the caller declares):
# shellcheck disable=SC2034,SC2154
#
# Pieces bench/fs.sh and bench/exec.sh share: logs, a free loopback port, and
# a throwaway sshd on 127.0.0.1 with its own host key and an ed25519 client
# key. Sourced after the caller defines say, die, TMP, LOGS, the associative
# array DAEMONS (name -> pid, stopped by the caller's cleanup) and
# CREATED_RUN_SSHD (set to 1 here when /run/sshd had to be made).

show_log() { # NAME
	[ -s "$LOGS/$1.log" ] && { say "--- last lines of $1's log:"; tail -n 20 "$LOGS/$1.log" >&2; }
	return 0
}

free_port() {
	local p i
	for i in $(seq 100); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# start_sshd SSHD_EXTRA CLIENT_EXTRA: write $TMP/ssh/{sshd,client}_config
# (extra lines appended to each; the client Host is "wsb-bench", cipher
# $SSH_CIPHER), start sshd -D as DAEMONS[sshd], and set SSHD_PORT and
# SSH_DIR. Does not wait for it: see wait_ssh.
start_sshd() {
	local d=$TMP/ssh me
	me=$(id -un)
	SSH_DIR=$d
	mkdir -p "$d"
	chmod 700 "$d"
	ssh-keygen -q -t ed25519 -N '' -C wsb-bench-host -f "$d/host_ed25519"
	ssh-keygen -q -t ed25519 -N '' -C wsb-bench-client -f "$d/client_ed25519"
	cp "$d/client_ed25519.pub" "$d/authorized_keys"
	echo "wsb-bench $(cut -d' ' -f1,2 "$d/host_ed25519.pub")" >"$d/known_hosts"
	SSHD_PORT=$(free_port) || die "no free TCP port on 127.0.0.1"
	cat >"$d/sshd_config" <<EOC
Port $SSHD_PORT
ListenAddress 127.0.0.1
HostKey $d/host_ed25519
PidFile $d/sshd.pid
AuthorizedKeysFile $d/authorized_keys
AllowUsers $me
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
LogLevel ERROR
$1
EOC
	cat >"$d/client_config" <<EOC
Host wsb-bench
	HostName 127.0.0.1
	Port $SSHD_PORT
	User $me
	HostKeyAlias wsb-bench
	IdentityFile $d/client_ed25519
	IdentitiesOnly yes
	UserKnownHostsFile $d/known_hosts
	GlobalKnownHostsFile /dev/null
	StrictHostKeyChecking yes
	BatchMode yes
	Ciphers $SSH_CIPHER
	Compression no
$2
EOC
	if [ "$(id -u)" = 0 ] && [ ! -d /run/sshd ]; then
		mkdir -p /run/sshd && chmod 755 /run/sshd && CREATED_RUN_SSHD=1
	fi
	/usr/sbin/sshd -t -f "$d/sshd_config" 2>"$LOGS/sshd.log" ||
		{ show_log sshd; die "sshd rejects its config"; }
	/usr/sbin/sshd -D -f "$d/sshd_config" -E "$LOGS/sshd.log" &
	DAEMONS[sshd]=$!
}

# wait_ssh SSH_COMMAND...: run "SSH_COMMAND... wsb-bench true" until it
# succeeds (up to 10 s); dies if sshd exits or never answers.
wait_ssh() {
	local _
	for _ in $(seq 100); do
		"$@" wsb-bench true 2>>"$LOGS/ssh.log" </dev/null && return 0
		kill -0 "${DAEMONS[sshd]}" 2>/dev/null || { show_log sshd; die "sshd exited at start"; }
		sleep 0.1
	done
	show_log sshd
	show_log ssh
	die "cannot ssh to the throwaway sshd on 127.0.0.1:$SSHD_PORT"
}
