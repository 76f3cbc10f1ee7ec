#!/bin/sh
# slowtally: the body is "<log file> <call id>"; works for 0.3 s, appends the id to the log
# (one line per execution, so a test counts how often each call ran), then answers "ok <id>".
read -r log id
sleep 0.3
echo "$id" >> "$log"
printf 'ok %s' "$id"
