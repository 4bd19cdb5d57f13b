#!/usr/bin/env bash
# placeholder, replaced by the real test in the next commit
exit 77
