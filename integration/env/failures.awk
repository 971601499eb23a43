# failures.awk: reads the output of `go test -v` and prints, for every test
# that failed, the last lines printed under its name, so that the end of a
# long CI log names what failed and why (the middle of such a log is often
# all that is cut). Used by the Makefile's test targets:
#   awk -f integration/env/failures.awk test.log
#
# `go test -v` marks whose output follows with "=== RUN", "=== CONT",
# "=== NAME" and "=== PAUSE" lines; a parallel test's lines are interleaved
# with others', so each line is filed under the test named last.

# A test's own messages (t.Log, t.Error: "file.go:123: ...") are what
# explain a failure, so up to 30 of them are kept apart from the last 10
# other lines (a child process's log, for instance).
BEGIN { keepmsg = 30; keep = 10; nfail = 0; cur = "" }

/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }

/^ *--- FAIL: / {
	name = $3
	if (!(name in failed)) { failed[name] = 1; order[++nfail] = name }
	next
}

/^ *--- (PASS|SKIP): / { next }

/^(panic: |fatal error: |FAIL\t|FAIL$|ok  \t)/ {
	if ($0 ~ /^(panic|fatal error)/) { panics[++npanic] = $0 }
	if ($0 ~ /^FAIL\t/) { pkgs[++npkg] = $0 }
	next
}

{
	if (cur == "") next
	if ($0 ~ /^ +[A-Za-z0-9_.-]+\.go:[0-9]+: /) {
		n = ++nmsg[cur]
		msgs[cur, n] = $0
		if (n > keepmsg) delete msgs[cur, n - keepmsg]
		next
	}
	n = ++count[cur]
	lines[cur, n] = $0
	if (n > keep) delete lines[cur, n - keep]
}

END {
	if (nfail == 0 && npanic == 0 && npkg == 0) exit 0
	print ""
	print "==================== failures ===================="
	for (i = 1; i <= npkg; i++) print pkgs[i]
	for (i = 1; i <= npanic; i++) print panics[i]
	for (i = 1; i <= nfail; i++) {
		name = order[i]
		print ""
		print "--- FAIL: " name
		n = count[name]
		if (n > 0) print "  its last other lines:"
		for (j = (n > keep ? n - keep + 1 : 1); j <= n; j++) print "    " lines[name, j]
		n = nmsg[name]
		if (n > 0) print "  its last messages:"
		for (j = (n > keepmsg ? n - keepmsg + 1 : 1); j <= n; j++) print "    " msgs[name, j]
	}
	print "=================================================="
}
