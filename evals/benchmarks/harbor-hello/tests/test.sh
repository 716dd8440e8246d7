#!/bin/bash
# Harbor's verifier contract: write the reward to /logs/verifier.
cd /app
if python3 -c 'import calc; assert calc.add(2, 3) == 5 and calc.add(-1, 1) == 0'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
