mkdir -p $OUT && python3 scripts/torch-first-conv-padding.py 2>&1 | tee $OUT/first-conv-padding.jsonl   # PyTorch 2.11 (cuDNN 9.19) alone; no carry
