#!/bin/bash
# Offline: the test is plain Python (TB1's template fetches pytest with uv).
python3 "$TEST_DIR/test_outputs.py"
