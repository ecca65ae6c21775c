"""The pickle format family (raw pickle streams, legacy torch.save)."""
