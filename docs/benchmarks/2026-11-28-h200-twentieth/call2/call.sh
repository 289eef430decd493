bash scripts/gpu-host-profile-call.sh $OUT   # diagnostic build (cuda,host-profile, symbols kept) of the call-1 code; carry .device-bin .device-data
