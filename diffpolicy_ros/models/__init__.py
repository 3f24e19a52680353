"""Layer 2: encoders, fusion, the diffusion head (U-Net + schedule), Gaussian head, critic."""
