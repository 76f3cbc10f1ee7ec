#!/bin/sh
# echo-binary: copies the body (stdin) to the output (stdout), byte for byte.
exec cat
