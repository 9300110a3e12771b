"""The pieces of bench/gpu_checks.py: every GPU figure from one prepared command per device call.

record (the figures file, deadlines, phases), carry (what travels: wheels, the model in two parts),
device (the card's facts, its measured bf16 peak and memory bandwidth), shapes (random models at real
sizes), speed (a GRPO step through the native engine and the trainer: decode vs the bandwidth bound,
training MFU), engine_checks (greedy identity with HF generate, the KV budget), fsdp (a sharded step
equal to the plain one), loop (steps per hour through the product's GRPO loop), learning (command 2:
SFT, 100+ GiGPO steps, 200 held-out scenes).
"""
