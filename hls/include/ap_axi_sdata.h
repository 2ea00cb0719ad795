// ap_axi_sdata.h: the subset of the Vitis HLS AXI4-Stream side-channel types our generated kernels
// use, for C simulation with g++ (written for OptimusNIC; field names follow the documented API).
//
// `ap_axiu<D, 0, 0, 0>`: D data bits with TKEEP, TSTRB and TLAST (no TUSER/TID/TDEST).
#ifndef OPTIMUSNIC_AP_AXI_SDATA_H
#define OPTIMUSNIC_AP_AXI_SDATA_H

#include "ap_int.h"

template <int D, int U, int TI, int TD>
struct ap_axiu {
  static_assert(U == 0 && TI == 0 && TD == 0, "this subset has no TUSER/TID/TDEST side channels");
  ap_uint<D> data;
  ap_uint<(D + 7) / 8> keep;
  ap_uint<(D + 7) / 8> strb;
  ap_uint<1> last;
};

#endif  // OPTIMUSNIC_AP_AXI_SDATA_H
