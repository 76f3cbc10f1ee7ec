#!/bin/sh
# gated: the body is a file name; fails (exit 1) while that file exists, else answers "open".
read -r gate
if [ -e "$gate" ]; then
  echo "gate $gate is closed" >&2
  exit 1
fi
printf 'open'
