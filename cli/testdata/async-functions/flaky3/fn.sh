#!/bin/sh
# flaky3: the body is "<log file> <call id>"; appends the id to the log on every try and fails
# (exit 1) until the id is in the log three times, then answers "ok <id> after <n> tries".
read -r log id
echo "$id" >> "$log"
n=$(grep -c "^$id\$" "$log")
if [ "$n" -lt 3 ]; then
  echo "try $n of $id fails" >&2
  exit 1
fi
printf 'ok %s after %s tries' "$id" "$n"
