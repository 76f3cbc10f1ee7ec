#!/bin/sh
# tally: the body is "<log file> <call id>"; appends the id to the log (one line per execution,
# so a test counts how often each call ran, across nodes), then answers "ok <id>".
read -r log id
echo "$id" >> "$log"
printf 'ok %s' "$id"
